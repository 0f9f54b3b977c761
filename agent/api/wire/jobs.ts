/**
 * Wire schemas of /v1/jobs. The job table and its answers are declared once
 * beside the jobs leader task that produces them (mesh/jobs/job-table.ts);
 * clients reach them through this module.
 */
export {
  JobCompleteAnswerSchema, JobRecordSchema, JobSubmitAnswerSchema, JobsViewSchema,
  type JobCompleteAnswer, type JobRecord, type JobSubmitAnswer, type JobsView,
} from '../../../mesh/control/jobs/job-table.ts'
export { jobIdPattern } from '../../../mesh/control/jobs/job-spec.ts'
