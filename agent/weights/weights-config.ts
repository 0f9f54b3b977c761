/** Config section `weights` of the weight-transfer agent (units in the names; see agent/config/schema.ts). */
import { Type, type Static } from '@sinclair/typebox'

export const WeightsSection = Type.Object({
  enabled: Type.Boolean({ description: 'Run the weight-transfer agent (needs the StateManager). Default: true.' }),
  dataListen: Type.String({ pattern: '^(\\[[0-9a-fA-F:]+\\]|[^:\\s]+):\\d{1,5}$', description: 'host:port of the weight data server (TCP, authenticated with the cluster key); port 0 picks a free one. Default: "0.0.0.0:7461" (dev: "127.0.0.1:0").' }),
  retainVersions: Type.Integer({ minimum: 1, maximum: 1000, description: 'Committed versions kept per model; older ones are retired when a new one commits. Default: 2.' }),
  streams: Type.Integer({ minimum: 1, maximum: 64, description: 'Parallel connections of a pull unless the request says otherwise. Default: 4.' }),
  chunkBytes: Type.Integer({ minimum: 65536, maximum: 64 * 2 ** 20, description: 'Bytes per checksummed chunk of a published tensor and per piece of a pull. Default: 4194304 (4 MiB).' }),
  durable: Type.Boolean({ description: 'Write published versions to the NVMe tier so they survive a restart (pulled copies stay in memory). Default: true.' }),
  authTimeoutMs: Type.Integer({ minimum: 100, maximum: 60_000, description: 'Time a data connection has to authenticate, in milliseconds. Default: 5000.' }),
}, { additionalProperties: false })

export type WeightsConfig = Static<typeof WeightsSection>

export const defaultWeightsConfig: WeightsConfig = {
  enabled: true,
  dataListen: '0.0.0.0:7461',
  retainVersions: 2,
  streams: 4,
  chunkBytes: 4 * 2 ** 20,
  durable: true,
  authTimeoutMs: 5000,
}

export const devWeightsConfig: WeightsConfig = { ...defaultWeightsConfig, dataListen: '127.0.0.1:0' }
