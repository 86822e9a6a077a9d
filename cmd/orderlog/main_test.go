package main

import (
	"os"
	"testing"
)

// runMainEnv makes the test binary act as the orderlog binary, so crash
// tests can start real server processes without a separate build.
const runMainEnv = "ORDERLOG_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
