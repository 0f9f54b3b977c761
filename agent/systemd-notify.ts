/**
 * sd_notify(3): tells systemd (Type=notify) that the agent is ready or
 * stopping. Harmless when not under systemd: without NOTIFY_SOCKET nothing is
 * sent. Node cannot send unix datagrams, so the native addon sends them.
 */
import type { Logger } from 'pino'
import { notifySystemd as sendNotification } from '../native/index.ts'

export async function notifySystemd (message: string, logger: Logger): Promise<boolean> {
  if (process.env.NOTIFY_SOCKET === undefined) return false
  try {
    return sendNotification(message)
  } catch (err) {
    logger.error({ err, message }, 'cannot notify systemd')
    return false
  }
}
