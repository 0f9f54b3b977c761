/** /v1/mesh and /v1/mesh/peers: thin adapters over the mesh subsystem (ERR_UNAVAILABLE with its reason when it is not running). */
import type { FastifyInstance } from 'fastify'
import { AgentError } from '../../../core/errors.ts'
import type { Mesh } from '../../../mesh/membership/mesh-service.ts'
import { MeshInfoSchema, PeersSchema } from '../wire/mesh.ts'
import { errorResponses } from '../wire/errors.ts'

/** The mesh, or why there is none (subsystem skipped or failed). */
export interface MeshSource {
  mesh(): Pick<Mesh, 'info' | 'peers'> | { unavailable: string }
}

export function registerMeshRoutes (app: FastifyInstance, source: MeshSource): void {
  const mesh = (): Pick<Mesh, 'info' | 'peers'> => {
    const m = source.mesh()
    if ('unavailable' in m) throw new AgentError('ERR_MESH_UNAVAILABLE', `the mesh is not running: ${m.unavailable}`)
    return m
  }
  app.get('/v1/mesh', {
    schema: {
      summary: 'This agent in the mesh: addresses, connections, seeds, member counts, message rates, dropped messages, dissemination latency',
      response: { 200: MeshInfoSchema, ...errorResponses },
    },
  }, async () => mesh().info())

  app.get('/v1/mesh/peers', {
    schema: {
      summary: 'The other agents: state (alive, suspect, dead), incarnation, GPUs, host pool, preemptible, last heard, latest availability record',
      response: { 200: PeersSchema, ...errorResponses },
    },
  }, async () => ({ peers: mesh().peers() }))
}
