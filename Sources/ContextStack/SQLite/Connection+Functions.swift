import CSQLite
import Foundation

extension Connection {
    /// Registers ContextStack's SQL functions on this connection:
    ///
    /// - `cs_text(op, flags, value, pattern)`: the string operators (LIKE, CONTAINS,
    ///   BEGINSWITH, ENDSWITH, MATCHES with case and diacritic options), by the same code as
    ///   in-memory evaluation; NULL when `value` is NULL.
    func registerFunctions() throws(SQLiteError) {
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

extension TextMatch {
    /// The operator codes `cs_text` takes, as bound by the SQL generator.
    static let operatorCodes: [Int: TextOperator] = Dictionary(uniqueKeysWithValues: TextOperator.allCases.enumerated().map { ($0.offset, $0.element) })

    static func code(of op: TextOperator) -> Int { TextOperator.allCases.firstIndex(of: op)! }
}
