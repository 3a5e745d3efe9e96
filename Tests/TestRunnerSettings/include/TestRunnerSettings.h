#ifndef CONTEXTSTACK_TEST_RUNNER_SETTINGS_H
#define CONTEXTSTACK_TEST_RUNNER_SETTINGS_H

/// How many tests Swift Testing runs at once in this test bundle (see settings.c).
extern const int contextstack_test_parallelization_width;

#endif
