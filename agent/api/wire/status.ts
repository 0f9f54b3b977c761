/** Wire schemas of GET /v1/status and GET /healthz. */
import { Type, type Static } from '@sinclair/typebox'
import { MeshStatusSchema } from './mesh.ts'
import { LeaderViewSchema } from './leader.ts'

export const SubsystemRecordSchema = Type.Object({
  id: Type.String(),
  state: Type.Union([Type.Literal('pending'), Type.Literal('ok'), Type.Literal('skipped'), Type.Literal('failed'), Type.Literal('stopped')]),
  reason: Type.Optional(Type.String()),
  startMs: Type.Optional(Type.Integer({ description: 'create + start time, ms' })),
})

/** Where the agent is in its life: `starting` until every subsystem started (NVMe recovery included), then `ready`, `stopping` once told to stop. */
export const AgentLifecycleSchema = Type.Union([Type.Literal('starting'), Type.Literal('ready'), Type.Literal('stopping')])
export type AgentLifecycle = Static<typeof AgentLifecycleSchema>

export const StatusSchema = Type.Object({
  node: Type.Object({ id: Type.String(), name: Type.String() }),
  state: Type.Optional(AgentLifecycleSchema),
  version: Type.String(),
  uptimeS: Type.Number({ description: 'seconds since the agent started' }),
  dev: Type.Boolean({ description: 'true for a --dev agent' }),
  process: Type.Optional(Type.Object({
    pid: Type.Integer(),
    rssBytes: Type.Integer({ description: 'resident memory of the agent process: its own, mapped files and the shared memory it maps (clients\' objects included)' }),
    ownBytes: Type.Optional(Type.Integer({ description: 'the agent\'s own resident memory (RssAnon: heap, native allocations, the host pool\'s touched pages); absent off Linux' })),
    fileBytes: Type.Optional(Type.Integer({ description: 'resident pages of mapped files (RssFile: the Node.js binary, libraries, the addon); absent off Linux' })),
    sharedMemoryBytes: Type.Optional(Type.Integer({ description: 'resident shared memory the agent maps (RssShmem: clients\' /dev/shm objects, adopted weight regions), counted by their creators too; absent off Linux' })),
    heapUsedBytes: Type.Integer({ description: 'V8 heap in use, objects not yet collected included' }),
    heapTotalBytes: Type.Integer({ description: 'V8 heap reserved' }),
    externalBytes: Type.Integer({ description: 'memory of Buffers and other objects outside the V8 heap (not the native host pool)' }),
    cpuSeconds: Type.Number({ description: 'user + system CPU time since start' }),
  }, { description: 'the agent\'s own footprint' })),
  subsystems: Type.Array(SubsystemRecordSchema),
  native: Type.Optional(Type.Unknown({ description: 'capabilities of the native addon: cuda, directIo, hugePages, memlockLimitBytes, ...' })),
  mesh: Type.Optional(MeshStatusSchema),
  leader: Type.Optional(LeaderViewSchema),
  weights: Type.Optional(Type.Object({
    address: Type.String({ description: 'host:port of the weight data server (TCP)' }),
    transports: Type.Optional(Type.Array(Type.Union([Type.Literal('ucx'), Type.Literal('tcp')]), { description: 'how its data server serves weights: "tcp" always, "ucx" when it answers one-sided UCX reads' })),
    ucxUnavailable: Type.Optional(Type.String({ description: 'why it serves no UCX, when it does not' })),
  })),
}, { additionalProperties: true, description: 'Later subsystems add their own sections.' })

export type StatusBody = Static<typeof StatusSchema>

export const HealthSchema = Type.Object({ ok: Type.Literal(true) })
export type HealthBody = Static<typeof HealthSchema>
