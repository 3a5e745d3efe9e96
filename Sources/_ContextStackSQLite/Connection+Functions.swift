import _ContextStackCore
import CSQLite
import Foundation

extension Connection {
    /// Registers ContextStack's SQL functions on this connection:
    ///
    /// - `cs_text(op, flags, value, pattern)`: the string operators (LIKE, CONTAINS,
    ///   BEGINSWITH, ENDSWITH, MATCHES with case and diacritic options), by the same code as
    ///   in-memory evaluation; NULL when `value` is NULL.
    /// - `cs_fold(flags, value)`: text with case and/or diacritics folded away, for comparisons
    ///   with options (`name ==[c] 'ada'`), by `TextMatch.fold`; any other value unchanged.
    /// - `cs_pow(x, y)`: `x ** y` in a predicate, as `pow` computes it; NULL when either is
    ///   NULL (SQLite's own `pow` exists only in builds with its math functions).
    package func registerFunctions() throws(SQLiteError) {
        let power = sqlite3_create_function_v2(
            handle, "cs_pow", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, count, arguments in
                guard count == 2, let arguments,
                      sqlite3_value_type(arguments[0]) != SQLITE_NULL, sqlite3_value_type(arguments[1]) != SQLITE_NULL
                else { sqlite3_result_null(context); return }
                // SQLite stores a NaN result as NULL, as `ArithmeticOperator.apply` does.
                sqlite3_result_double(context, pow(sqlite3_value_double(arguments[0]), sqlite3_value_double(arguments[1])))
            },
            nil, nil, nil)
        guard power == SQLITE_OK else { throw error(power, sql: "cs_pow") }
        let folding = sqlite3_create_function_v2(
            handle, "cs_fold", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, count, arguments in
                guard count == 2, let arguments else { sqlite3_result_null(context); return }
                guard sqlite3_value_type(arguments[1]) == SQLITE_TEXT, let bytes = sqlite3_value_text(arguments[1]) else {
                    sqlite3_result_value(context, arguments[1])
                    return
                }
                let options = MatchOptions(rawValue: Int(sqlite3_value_int(arguments[0])))
                let text = String(decoding: UnsafeBufferPointer(start: bytes, count: Int(sqlite3_value_bytes(arguments[1]))), as: UTF8.self)
                var folded = TextMatch.fold(text, options)
                folded.withUTF8 { utf8 in
                    guard let base = utf8.baseAddress, !utf8.isEmpty else { sqlite3_result_text(context, "", 0, nil); return }
                    base.withMemoryRebound(to: CChar.self, capacity: utf8.count) { sqlite3_result_text(context, $0, Int32(utf8.count), transient) }
                }
            },
            nil, nil, nil)
        guard folding == SQLITE_OK else { throw error(folding, sql: "cs_fold") }
        let code = sqlite3_create_function_v2(
            handle, "cs_text", 4, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, count, arguments in
                guard count == 4, let arguments,
                      let op = TextMatch.operatorCodes[Int(sqlite3_value_int(arguments[0]))],
                      let patternBytes = sqlite3_value_text(arguments[3])
                else { sqlite3_result_null(context); return }
                let options = MatchOptions(rawValue: Int(sqlite3_value_int(arguments[1])))
                guard sqlite3_value_type(arguments[2]) == SQLITE_TEXT, let valueBytes = sqlite3_value_text(arguments[2]) else {
                    if sqlite3_value_type(arguments[2]) == SQLITE_NULL { sqlite3_result_null(context) } else { sqlite3_result_int(context, 0) }
                    return
                }
                let value = String(decoding: UnsafeBufferPointer(start: valueBytes, count: Int(sqlite3_value_bytes(arguments[2]))), as: UTF8.self)
                let pattern = String(decoding: UnsafeBufferPointer(start: patternBytes, count: Int(sqlite3_value_bytes(arguments[3]))), as: UTF8.self)
                sqlite3_result_int(context, TextMatch.evaluate(op, options, value, pattern) ? 1 : 0)
            },
            nil, nil, nil)
        guard code == SQLITE_OK else { throw error(code, sql: "cs_text") }
    }
}

/// The state of one running median or standard-deviation aggregate.
private final class AggregateState {
    var values: [Double] = []
    // Welford's running mean and sum of squared differences, for the standard deviation.
    var count = 0.0
    var mean = 0.0
    var squares = 0.0

    func add(_ value: Double) {
        values.append(value)
        count += 1
        let delta = value - mean
        mean += delta / count
        squares += delta * (value - mean)
    }

    var median: Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        guard sorted.count.isMultiple(of: 2) else { return sorted[middle] }
        // PostgreSQL's `percentile_cont` interpolates so, and the two stores agree to the last
        // bit: `(a + b) / 2` of 0.1 and 0.7 is 0.39999999999999997, this 0.4.
        let (low, high) = (sorted[middle - 1], sorted[middle])
        return low + (high - low) * 0.5
    }

    /// The population standard deviation.
    var standardDeviation: Double? { count > 0 ? (squares / count).squareRoot() : nil }
}

extension Connection {
    /// Registers `cs_median(x)` and `cs_stddev(x)` (population), which ignore NULLs and give
    /// NULL over no values, like SQLite's own aggregates.
    package func registerAggregates() throws(SQLiteError) {
        let step: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { context, count, arguments in
            guard count == 1, let argument = arguments?[0] else { return }
            let type = sqlite3_value_type(argument)
            guard type == SQLITE_INTEGER || type == SQLITE_FLOAT else { return }
            guard let slot = sqlite3_aggregate_context(context, Int32(MemoryLayout<UnsafeMutableRawPointer?>.size))?
                .assumingMemoryBound(to: UnsafeMutableRawPointer?.self) else { return }
            if slot.pointee == nil { slot.pointee = Unmanaged.passRetained(AggregateState()).toOpaque() }
            Unmanaged<AggregateState>.fromOpaque(slot.pointee!).takeUnretainedValue().add(sqlite3_value_double(argument))
        }
        let medianFinal: @convention(c) (OpaquePointer?) -> Void = { context in
            Connection.finish(context) { $0.median }
        }
        let deviationFinal: @convention(c) (OpaquePointer?) -> Void = { context in
            Connection.finish(context) { $0.standardDeviation }
        }
        for (name, finish) in [("cs_median", medianFinal), ("cs_stddev", deviationFinal)] {
            let code = sqlite3_create_function_v2(handle, name, 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, nil, step, finish, nil)
            guard code == SQLITE_OK else { throw error(code, sql: name) }
        }
    }

    /// Sets an aggregate's result from its state, and frees the state.
    fileprivate static func finish(_ context: OpaquePointer?, _ result: (AggregateState) -> Double?) {
        let slot = sqlite3_aggregate_context(context, 0)?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
        guard let pointer = slot?.pointee else {
            sqlite3_result_null(context)
            return
        }
        let state = Unmanaged<AggregateState>.fromOpaque(pointer).takeRetainedValue()
        slot?.pointee = nil
        if let value = result(state) { sqlite3_result_double(context, value) } else { sqlite3_result_null(context) }
    }
}
