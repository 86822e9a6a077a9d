package tiering

import "os"

// Steps of a publish after which a crash test stops the worker.
const (
	afterPlan     = "after-plan"
	afterUpload   = "after-upload"
	afterManifest = "after-manifest" // and before T moves
)

// crashAt is the step named by ORDERLOG_TIERING_CRASH_AT, read once: the
// crash tests (cmd/orderlog) run a real process that kills itself with
// SIGKILL right after that step, so that each step's successor is tested
// against a real half-finished publish. Unset in every other run.
var crashAt = os.Getenv("ORDERLOG_TIERING_CRASH_AT")

func crashPoint(step string) {
	if crashAt != step {
		return
	}
	self, err := os.FindProcess(os.Getpid())
	if err == nil {
		self.Kill() // SIGKILL: nothing after this step runs
	}
	select {} // the signal is on its way
}
