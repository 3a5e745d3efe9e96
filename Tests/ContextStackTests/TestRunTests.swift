import Foundation
import TestRunnerSettings
import Testing

/// The settings of the test run itself (Tests/TestRunnerSettings/settings.c).
@Suite struct TestRunTests {
    /// The bundle limits how many tests run at once before Swift Testing starts, unless the
    /// environment says otherwise: without it, every test starts at once and waits minutes for
    /// the main actor in a full run on two cores.
    @Test func testsRunAFewAtATime() {
        let width = ProcessInfo.processInfo.environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"].flatMap { Int($0) }
        #expect(width != nil, "the constructor in settings.c did not run")
        #expect(contextstack_test_parallelization_width > 0)
    }
}
