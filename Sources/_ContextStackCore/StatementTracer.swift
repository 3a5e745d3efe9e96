import Synchronization

/// Hands the SQL of every statement a store's connections run to one closure (with `?` where
/// values are bound: values never reach the trace).
///
/// `@unchecked Sendable`: the closure sits behind `Locked`; `isOn` is an atomic that spares the
/// lock while nobody listens.
package final class StatementTracer: @unchecked Sendable {
    private let body = Locked<(@Sendable (String) -> Void)?>(nil)
    private let isOn = Atomic<Bool>(false)

    package init() {}

    package func set(_ newBody: (@Sendable (String) -> Void)?) {
        body.withLock { $0 = newBody }
        isOn.store(newBody != nil, ordering: .releasing)
    }

    /// Hands `sql` to the listener, if there is one; `sql` is not built otherwise.
    package func emit(_ sql: @autoclosure () -> String) {
        guard isOn.load(ordering: .acquiring), let body = body.withLock({ $0 }) else { return }
        body(sql())
    }
}
