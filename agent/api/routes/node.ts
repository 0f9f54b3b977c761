/** GET /v1/node: the node inventory. 503 when the inventory subsystem is not ok. */
import type { FastifyInstance } from 'fastify'
import { AgentError } from '../../../core/errors.ts'
import { NodeInventorySchema, type NodeInventory } from '../wire/node.ts'
import { errorResponses } from '../wire/errors.ts'

export interface InventorySource {
  /** The latest inventory, or undefined when it could not be taken. */
  inventory(): NodeInventory | undefined
}

export function registerNodeRoutes (app: FastifyInstance, source: InventorySource): void {
  app.get('/v1/node', {
    schema: {
      summary: 'Node inventory: CPUs, memory, disks, filesystems, network interfaces, GPUs',
      response: { 200: NodeInventorySchema, ...errorResponses },
    },
  }, async () => {
    const inventory = source.inventory()
    if (inventory === undefined) throw new AgentError('ERR_UNAVAILABLE', 'node inventory is not available (see `agentctl status` for the inventory subsystem)')
    return inventory
  })
}
