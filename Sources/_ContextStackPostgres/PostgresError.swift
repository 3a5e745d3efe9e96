import _ContextStackCore

/// An error reported by PostgreSQL or by libpq: the SQLSTATE, the server's message, and the
/// SQL that failed.
///
/// The description is the SQLSTATE, the server's primary message and the SQL, with its
/// placeholders, never the values bound to them. Credentials never appear: a connection error
/// names the server as `postgres://user@host:port/database`, without the password. The
/// server's `detail`, which for a unique violation quotes the duplicate values, is a property
/// to read, not part of the description.
///
/// For example:
///
/// ```swift
/// catch let error as PostgresError where error.code == .uniqueViolation { ... }
/// catch let error as PostgresError where error.code.isConnectionFailure { ... }
/// ```
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// A SQLSTATE: five characters, of which the first two name the class
    /// (PostgreSQL's "Appendix A. PostgreSQL Error Codes").
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The class: the first two characters (`"23"` for every integrity violation).
        public var errorClass: String { String(rawValue.prefix(2)) }

        /// Class 08, a session the server ended (`57P01` to `57P05`: an administrator's
        /// command, a fast or immediate shutdown, a crash of another backend, a server not yet
        /// accepting connections, the database dropped, `idle_session_timeout`; `25P03`:
        /// `idle_in_transaction_session_timeout`), or a connection that libpq found broken: the
        /// statement may or may not have reached the server, and the connection cannot be used
        /// again.
        ///
        /// A server that shuts down fast, or a failover that ends the old primary's sessions,
        /// tells each client `57P01` before it closes the connection; libpq reports that code
        /// to the connection's next statement. So does a server that closes an idle session.
        public var isConnectionFailure: Bool {
            errorClass == "08" || self == .connectionLost || Self.sessionEnded.contains(self)
        }

        /// The codes of a session the server ended, besides class 08.
        private static let sessionEnded: Set<Code> = [.adminShutdown, .crashShutdown, .cannotConnectNow, .databaseDropped,
                                                       .idleSessionTimeout, .idleInTransactionSessionTimeout]

        public static let uniqueViolation = Code(rawValue: "23505")
        public static let foreignKeyViolation = Code(rawValue: "23503")
        public static let notNullViolation = Code(rawValue: "23502")
        public static let serializationFailure = Code(rawValue: "40001")
        public static let deadlockDetected = Code(rawValue: "40P01")
        public static let syntaxError = Code(rawValue: "42601")
        /// A value the server's encoding cannot hold, such as U+0000 in text.
        public static let characterNotInRepertoire = Code(rawValue: "22021")
        public static let undefinedTable = Code(rawValue: "42P01")
        public static let undefinedColumn = Code(rawValue: "42703")
        /// An object (a view, say) depends on what a statement would drop.
        public static let dependentObjectsStillExist = Code(rawValue: "2BP01")
        public static let queryCanceled = Code(rawValue: "57014")
        /// A lock waited for longer than `lock_timeout` allows.
        public static let lockNotAvailable = Code(rawValue: "55P03")
        public static let adminShutdown = Code(rawValue: "57P01")
        /// The session ended because another server process crashed.
        public static let crashShutdown = Code(rawValue: "57P02")
        public static let cannotConnectNow = Code(rawValue: "57P03")
        /// The session ended because its database was dropped.
        public static let databaseDropped = Code(rawValue: "57P04")
        /// The server closed a session idle for longer than `idle_session_timeout`.
        public static let idleSessionTimeout = Code(rawValue: "57P05")
        /// The server closed a session idle inside a transaction for longer than
        /// `idle_in_transaction_session_timeout`.
        public static let idleInTransactionSessionTimeout = Code(rawValue: "25P03")
        public static let insufficientPrivilege = Code(rawValue: "42501")
        /// Could not connect (SQLSTATE `08001`): the server is down, refused, or timed out.
        public static let cannotConnect = Code(rawValue: "08001")
        /// The connection broke during a call and libpq reported no SQLSTATE. Not a SQLSTATE
        /// PostgreSQL defines (`08006` is "connection failure"; this is the same case seen from
        /// the client): always a connection failure.
        public static let connectionLost = Code(rawValue: "08006")

        public var description: String { rawValue }
    }

    /// The SQLSTATE.
    public let code: Code
    /// The server's (or libpq's) message, without its "ERROR:" prefix.
    public let message: String
    /// The server's detail, when it gave one. It may quote data (for a unique violation, the
    /// duplicate key and its values), so the description leaves it out.
    public let detail: String?
    /// The constraint the error names, when it names one.
    public let constraint: String?
    /// The statement that failed, when there was one.
    public let sql: String?

    public init(code: Code, message: String, detail: String? = nil, constraint: String? = nil, sql: String? = nil) {
        self.code = code
        self.message = message
        self.detail = detail
        self.constraint = constraint
        self.sql = sql
    }

    public var description: String {
        var text = "PostgreSQL error \(code.rawValue): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }
}
