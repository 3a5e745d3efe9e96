@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Testing
import Foundation

/// Runs `body(0)`, …, `body(count - 1)` each on its own thread, and resumes once all returned.
///
/// Unlike `DispatchQueue.concurrentPerform` or a task group, every call really runs at the same
/// time as the others (so bodies may wait for each other), and no thread of Swift's
/// cooperative pool is blocked meanwhile.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    let remaining = Locked(count)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        for index in 0..<count {
            let thread = Thread {
                body(index)
                if remaining.withLock({ $0 -= 1; return $0 == 0 }) { continuation.resume() }
            }
            thread.start()
        }
    }
}

/// Checks that a trap's message, which the exit test saw on standard error, contains each of
/// `fragments`: misuse must fail with a message that says what to do instead.
func expectTrapMessage(_ result: ExitTest.Result?, contains fragments: String..., sourceLocation: SourceLocation = #_sourceLocation) {
    // A nil result means the exit expectation itself failed, which was recorded already.
    guard let result else { return }
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    for fragment in fragments {
        #expect(text.contains(fragment), "the trap's message lacks \"\(fragment)\": \(text.suffix(600))", sourceLocation: sourceLocation)
    }
}
