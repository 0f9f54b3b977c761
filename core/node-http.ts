/**
 * node:http, loaded as CommonJS. An ESM import of node:http (even of one
 * name) makes Node build the module's ESM facade, which reads every export,
 * and the lazy WebSocket / EventSource getters among them load undici: about
 * 90 ms of CPU on every start of the agent and of agentctl, for nothing either
 * uses. Import values from here; types still come from `import type … 'node:http'`.
 */
export const nodeHttp = process.getBuiltinModule('node:http')
