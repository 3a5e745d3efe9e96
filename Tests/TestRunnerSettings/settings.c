// Settings of the test run that must be in place before Swift Testing reads its configuration,
// which it does in the test bundle's `main`: so they are set by a constructor, when the bundle
// is loaded.
//
// Swift Testing starts every test at once. Most suites run on the main actor, and on a 2-core
// machine hundreds of tests then queue for it (and for PostgreSQL's backends), while each test's
// time limit runs from its own start: in a full run most of them waited minutes for turns
// and failed at their limits, on no fault of the code. With eight tests at a time, each test
// waits only for the other seven, the limits mean what they say, and the whole run is faster
// (212 s against 390 s on the 2-core machine where this was measured, 2026-11-26).
//
// A width set in the environment wins: SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=1 runs one
// test at a time, for instance.
//
// SIGPIPE is ignored: tests write to the pipes of child processes, and a child that died (a test
// failure) must fail its test with EPIPE, not end the whole run with signal 13 and no message.

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include "TestRunnerSettings.h"

const int contextstack_test_parallelization_width = 8;

__attribute__((constructor))
static void contextstack_set_test_run_settings(void) {
    char width[16];
    snprintf(width, sizeof width, "%d", contextstack_test_parallelization_width);
    setenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH", width, 0);
    signal(SIGPIPE, SIG_IGN);
}
