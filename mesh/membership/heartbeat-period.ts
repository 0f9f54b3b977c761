/**
 * How often an agent re-sends its availability record when nothing changed
 * (availability-publisher.ts): heartbeatIntervalMs up to
 * heartbeatMembersPerInterval live members, then proportionally longer, so
 * every agent receives about that many heartbeat records per
 * heartbeatIntervalMs whatever the cluster's size. I/O-free (the membership
 * simulator, mesh/membership/membership-sim.ts, uses it too).
 */

/** Live members per heartbeatIntervalMs before the heartbeat period starts to grow. */
export const heartbeatMembersPerInterval = 6

/** The heartbeat period for `liveMembers` members. */
export function heartbeatPeriodMs (heartbeatIntervalMs: number, liveMembers: number): number {
  return Math.round(heartbeatIntervalMs * Math.max(1, liveMembers / heartbeatMembersPerInterval))
}
