import _ContextStackCore
import CSQLite

/// An error reported by SQLite: the result code, SQLite's message, and the SQL that failed.
///
/// Bound values never appear in the description, so logging an error does not leak data.
///
/// For example:
///
/// ```swift
/// do { try stack.addDatabaseStore(at: url) }
/// catch let error as SQLiteError where error.code == .busy { ... }
/// ```
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    /// An SQLite result code. The primary code is the low byte of the extended code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The extended result code, as `sqlite3_extended_errcode` reports it.
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// The primary result code (`SQLITE_CONSTRAINT` for `SQLITE_CONSTRAINT_UNIQUE`).
        public var primary: Code { Code(rawValue: rawValue & 0xFF) }

        public static let error = Code(rawValue: SQLITE_ERROR)
        public static let busy = Code(rawValue: SQLITE_BUSY)
        public static let locked = Code(rawValue: SQLITE_LOCKED)
        public static let readOnly = Code(rawValue: SQLITE_READONLY)
        public static let ioError = Code(rawValue: SQLITE_IOERR)
        public static let corrupt = Code(rawValue: SQLITE_CORRUPT)
        public static let full = Code(rawValue: SQLITE_FULL)
        public static let cantOpen = Code(rawValue: SQLITE_CANTOPEN)
        public static let constraint = Code(rawValue: SQLITE_CONSTRAINT)
        public static let mismatch = Code(rawValue: SQLITE_MISMATCH)
        public static let misuse = Code(rawValue: SQLITE_MISUSE)
        public static let notADatabase = Code(rawValue: SQLITE_NOTADB)
        public static let permission = Code(rawValue: SQLITE_PERM)
        public static let noMemory = Code(rawValue: SQLITE_NOMEM)
        public static let interrupt = Code(rawValue: SQLITE_INTERRUPT)

        public var description: String {
            let text = String(cString: sqlite3_errstr(rawValue))
            return "\(text) (\(rawValue))"
        }
    }

    /// The extended result code.
    public let code: Code
    /// SQLite's message for this failure.
    public let message: String
    /// The statement that failed, when there was one.
    public let sql: String?

    public init(code: Code, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    public var description: String {
        var text = "SQLite error \(code.rawValue): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }

}

extension SQLiteError.Code {
    /// Lets `catch SQLiteError.Code.constraint` match any constraint failure, extended or not.
    public static func ~= (code: SQLiteError.Code, error: any Error) -> Bool {
        guard let error = error as? SQLiteError else { return false }
        return error.code == code || error.code.primary == code
    }
}
