import _ContextStackCore
import CSQLite
import Foundation
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

    fileprivate func emit(_ sql: @autoclosure () -> String) {
        guard isOn.load(ordering: .acquiring), let body = body.withLock({ $0 }) else { return }
        body(sql())
    }
}

extension Connection {
    /// Reports each statement this connection starts to `tracer` (which must outlive it: the
    /// store owns both).
    package func install(_ tracer: StatementTracer) {
        let context = Unmanaged.passUnretained(tracer).toOpaque()
        sqlite3_trace_v2(handle, UInt32(SQLITE_TRACE_STMT), { _, context, statement, _ in
            guard let context, let statement else { return 0 }
            let tracer = Unmanaged<StatementTracer>.fromOpaque(context).takeUnretainedValue()
            tracer.emit(sqlite3_sql(OpaquePointer(statement)).map { String(cString: $0) } ?? "")
            return 0
        }, context)
    }
}
