// Package follow keeps local copies of growing files in a sandbox current
// through ferry's agent: a [Follower] appends what the agent's Follow stream
// sends to files in a local directory, prints the complete lines of one of
// them as they arrive, and, when the connection drops, dials again and
// resumes from the sizes of the local files, so that across any number of
// drops (and restarts of the follower) no byte is lost and none is doubled.
// It is what `ferry pull SANDBOX --follow` and `ferry run` use to show a
// run's agent.ndjson and runner.log live.
package follow
