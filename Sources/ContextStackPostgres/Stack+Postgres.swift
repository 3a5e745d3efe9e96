import ContextStack
import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres
import _ContextStackPostgresStore

extension Stack {
    /// Adds a PostgreSQL store: the model's tables in a PostgreSQL database, shared by every
    /// process and machine that opens it. Contexts, topologies, predicates and live results
    /// work on it as on SQLite.
    ///
    /// For example:
    ///
    /// ```swift
    /// import ContextStackPostgres
    ///
    /// try stack.addPostgresStore(url: URL(string: "postgres://app:secret@db.internal:5432/app")!)
    /// ```
    ///
    /// The first process to open an empty database creates the tables (or migrates them), in
    /// one transaction under an advisory lock, so app servers starting together do it once. A
    /// database is never dropped or reset for you; whenever this throws, the database is as
    /// it was.
    ///
    /// - Parameters:
    ///   - url: the server, as libpq takes it: `postgres://user:password@host:port/database`,
    ///     with libpq's parameters (`?sslmode=require`, `?connect_timeout=5`, …). Messages and
    ///     `trace` never show its password.
    ///   - configuration: the model configuration whose entities the store holds; `nil` for
    ///     every entity. Several configurations may share one database (each keeps its own
    ///     description in `Z_METADATA`); all PostgreSQL stores of a stack are in one database.
    ///   - autoMigrating: migrate a database written by an earlier model version, in one
    ///     transaction (Docs/Postgres.md, "Migration"); `false` throws
    ///     `StoreError.Code.modelMismatch` for such a database instead.
    ///   - tracksHistory: record every save in the database's history, and follow the commits
    ///     other processes and machines make (Docs/History.md). On by default; a database
    ///     whose history another stack turned on tracks it whatever this says.
    /// - Throws: `StoreError` (`.modelMismatch`, `.cannotMigrate`, `.foreignDatabase`,
    ///   `.alreadyAdded`, `.unknownConfiguration`, and `.cannotOpen` for a server older than
    ///   PostgreSQL 13 or a name PostgreSQL would shorten); `PostgresError` when the server
    ///   cannot be reached or refuses (see Docs/Postgres.md).
    public func addPostgresStore(url: URL, configuration: String? = nil, autoMigrating: Bool = true, tracksHistory: Bool = true) throws {
        let settings = PostgresSettings(url: url)
        try settings.validate()
        try addStore(identity: url.absoluteString, label: "the PostgreSQL database \(settings.redactedURL)",
                     configuration: configuration, autoMigrating: autoMigrating) { schema, existing in
            if let existing {
                guard let store = existing as? PostgresStore else {
                    throw StoreError(.alreadyAdded, "The stack already has an SQLite store; a PostgreSQL store can only be added beside PostgreSQL stores.")
                }
                guard store.settings.url == url else {
                    throw StoreError(.alreadyAdded, "The stack's PostgreSQL stores are in \(store.settings.redactedURL); every PostgreSQL store of a stack is in that one database (a commit is one transaction). Add \(settings.redactedURL) to another stack.")
                }
                try store.attach(schema: schema, autoMigrating: autoMigrating)
                return nil
            }
            return try PostgresStore(graph: graph, schema: schema, settings: settings, autoMigrating: autoMigrating,
                                     writesInBackground: rootContext == .shared, tracksHistory: tracksHistory,
                                     tracer: tracer) { [weak self] error in
                self?.report(error)
            }
        }
    }
}
