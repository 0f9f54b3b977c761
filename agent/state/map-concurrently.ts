/**
 * Runs `fn` over `items` with at most `limit` calls in flight and returns the
 * results in input order. On the first failure no new call starts; the
 * promise rejects with that error only after every started call has settled,
 * so a caller's rollback never races work still in flight.
 */
export async function mapConcurrently<T, R> (items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  let failed: { error: unknown } | undefined
  const worker = async (): Promise<void> => {
    while (failed === undefined && next < items.length) {
      const i = next++
      try {
        results[i] = await fn(items[i]!, i)
      } catch (error) {
        failed ??= { error }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker))
  if (failed !== undefined) throw failed.error
  return results
}
