@testable import ContextStack
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
