/**
 * The curve RLinf's auto-placement fits to per-instance profile points
 * (seconds keyed by environments per instance) to price splits nobody
 * measured: power (a·x^b), exponential (a·e^(b·x)), logarithmic
 * (a + b·ln x) and quadratic (a·x² + b·x + c), least squares each, the one
 * with the best R² kept (ties: the first in that order). A measured point is
 * returned as measured, never from the curve.
 *
 * The logarithmic and quadratic fits are linear least squares (exact). The
 * power and exponential fits are nonlinear least squares in y, as scipy's
 * curve_fit does: Levenberg–Marquardt started from the log-linear fit (RLinf
 * starts from fixed guesses; starting from the linearised fit finds the same
 * minimum on well-behaved data and does not depend on the data's scale).
 * A model needs at least as many points as parameters (curve_fit refuses
 * fewer), so a quadratic needs three points and every profile at least two.
 */
import { AgentError } from '../../../core/errors.ts'

export type CurveKind = 'power' | 'exponential' | 'logarithmic' | 'polynomial'

export interface FittedCurve {
  kind: CurveKind
  params: number[]
  rSquared: number
  /** The measured value at x if there is one, else the curve's. */
  at(x: number): number
}

type Model = (x: number, p: readonly number[]) => number
const models: Record<CurveKind, Model> = {
  power: (x, [a, b]) => a! * x ** b!,
  exponential: (x, [a, b]) => a! * Math.exp(b! * x),
  logarithmic: (x, [a, b]) => a! + b! * Math.log(x),
  polynomial: (x, [a, b, c]) => a! * x * x + b! * x + c!,
}

/** Fits the profile points (x → y); throws ERR_WORKFLOW_INVALID when fewer than two or none fits. */
export function fitProfileCurve (points: ReadonlyMap<number, number>, what: string): FittedCurve {
  const xs = [...points.keys()]
  const ys = xs.map(x => points.get(x)!)
  if (xs.length < 2) throw new AgentError('ERR_WORKFLOW_INVALID', `${what}: ${xs.length} profile point${xs.length === 1 ? '' : 's'}; a curve needs two at least (three for the quadratic)`)
  const candidates: Array<{ kind: CurveKind, params: number[] }> = []
  const positive = (vs: number[]): boolean => vs.every(v => v > 0)
  if (positive(xs) && positive(ys)) {
    const [lnA, b] = linearFit(xs.map(Math.log), ys.map(Math.log))
    candidates.push({ kind: 'power', params: levenbergMarquardt(models.power, xs, ys, [Math.exp(lnA), b]) })
  } else {
    candidates.push({ kind: 'power', params: levenbergMarquardt(models.power, xs, ys, [0.1, 0.5]) })
  }
  if (positive(ys)) {
    const [lnA, b] = linearFit(xs, ys.map(Math.log))
    candidates.push({ kind: 'exponential', params: levenbergMarquardt(models.exponential, xs, ys, [Math.exp(lnA), b]) })
  } else {
    candidates.push({ kind: 'exponential', params: levenbergMarquardt(models.exponential, xs, ys, [0.1, 0.01]) })
  }
  if (positive(xs)) candidates.push({ kind: 'logarithmic', params: linearFit(xs.map(Math.log), ys) })
  if (xs.length >= 3) candidates.push({ kind: 'polynomial', params: quadraticFit(xs, ys) })

  let best: FittedCurve | undefined
  for (const c of candidates) {
    if (!c.params.every(Number.isFinite)) continue
    const rSquared = rSquaredOf(ys, xs.map(x => models[c.kind](x, c.params)))
    if (Number.isNaN(rSquared)) continue
    if (best === undefined || rSquared > best.rSquared) {
      const model = models[c.kind]
      best = { kind: c.kind, params: c.params, rSquared, at: x => points.get(x) ?? model(x, c.params) }
    }
  }
  if (best === undefined) throw new AgentError('ERR_WORKFLOW_INVALID', `${what}: no curve fits the profile points`)
  return best
}

/** R² = 1 − SS_res / SS_tot; points that are all equal give 1 for an exact fit and −∞ otherwise. */
function rSquaredOf (ys: readonly number[], predicted: readonly number[]): number {
  const mean = ys.reduce((a, y) => a + y, 0) / ys.length
  let res = 0
  let tot = 0
  for (const [i, y] of ys.entries()) { res += (y - predicted[i]!) ** 2; tot += (y - mean) ** 2 }
  if (tot === 0) return res === 0 ? 1 : -Infinity
  return 1 - res / tot
}

/** Least squares y = p0 + p1·x. */
function linearFit (xs: readonly number[], ys: readonly number[]): [number, number] {
  const [p0, p1] = solveNormal(xs.map(x => [1, x]), ys)
  return [p0!, p1!]
}

/** Least squares y = a·x² + b·x + c, as [a, b, c]. */
function quadraticFit (xs: readonly number[], ys: readonly number[]): number[] {
  return solveNormal(xs.map(x => [x * x, x, 1]), ys)
}

/** Solves the normal equations (AᵀA) p = Aᵀy by Gaussian elimination with partial pivoting. */
function solveNormal (rows: readonly number[][], ys: readonly number[]): number[] {
  const n = rows[0]!.length
  const m = Array.from({ length: n }, (_, i) => Array.from({ length: n + 1 }, (_, j) =>
    j < n ? rows.reduce((s, r) => s + r[i]! * r[j]!, 0) : rows.reduce((s, r, k) => s + r[i]! * ys[k]!, 0)))
  return gauss(m)
}

function gauss (m: number[][]): number[] {
  const n = m.length
  for (let col = 0; col < n; col++) {
    let pivot = col
    for (let r = col + 1; r < n; r++) if (Math.abs(m[r]![col]!) > Math.abs(m[pivot]![col]!)) pivot = r
    const swapped = m[col]!
    m[col] = m[pivot]!
    m[pivot] = swapped
    const p = m[col]![col]!
    if (p === 0) return new Array<number>(n).fill(Number.NaN)
    for (let r = 0; r < n; r++) {
      if (r === col) continue
      const f = m[r]![col]! / p
      for (let c = col; c <= n; c++) m[r]![c]! -= f * m[col]![c]!
    }
  }
  return m.map((row, i) => row[n]! / row[i]!)
}

/** Minimises Σ (y − f(x, p))² from p0: damped Gauss–Newton with a forward-difference Jacobian. */
function levenbergMarquardt (f: Model, xs: readonly number[], ys: readonly number[], p0: readonly number[]): number[] {
  let p = [...p0]
  const cost = (q: readonly number[]): number => xs.reduce((s, x, i) => s + (ys[i]! - f(x, q)) ** 2, 0)
  let current = cost(p)
  let lambda = 1e-3
  for (let iteration = 0; iteration < 500 && Number.isFinite(current); iteration++) {
    const jacobian = xs.map(x => p.map((v, k) => {
      const h = 1e-7 * Math.max(1, Math.abs(v))
      const q = [...p]
      q[k] = v + h
      return (f(x, q) - f(x, p)) / h
    }))
    const residual = xs.map((x, i) => ys[i]! - f(x, p))
    const n = p.length
    const jtj = Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => jacobian.reduce((s, r) => s + r[i]! * r[j]!, 0)))
    const jtr = Array.from({ length: n }, (_, i) => jacobian.reduce((s, r, k) => s + r[i]! * residual[k]!, 0))
    let improved = false
    for (let tries = 0; tries < 20; tries++) {
      const step = gauss(jtj.map((row, i) => [...row.map((v, j) => i === j ? v * (1 + lambda) : v), jtr[i]!]))
      const next = p.map((v, k) => v + step[k]!)
      const c = next.every(Number.isFinite) ? cost(next) : Infinity
      if (c < current) {
        const gain = current - c
        p = next
        current = c
        lambda = Math.max(lambda / 10, 1e-12)
        improved = gain > 1e-15 * Math.max(1, current)
        break
      }
      lambda *= 10
    }
    if (!improved) break
  }
  return p
}
