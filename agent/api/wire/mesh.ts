/**
 * Wire schemas of /v1/mesh and /v1/mesh/peers. The views are declared once
 * beside the mesh that fills them (mesh/mesh-views.ts); clients reach them
 * through this module.
 */
export {
  MeshInfoSchema, MeshStatusSchema, PeersSchema, PeerViewSchema,
  type MeshInfo, type MeshStatus, type PeerView,
} from '../../../mesh/membership/mesh-views.ts'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'

/** GET /v1/mesh/peers. */
export interface PeersBody { peers: PeerView[] }
