import _ContextStackCore
import CSQLite
import Foundation

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
