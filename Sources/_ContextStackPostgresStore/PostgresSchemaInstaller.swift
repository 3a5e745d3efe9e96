import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

/// Creates a store's part of the model in a PostgreSQL database, or checks that the database
/// already holds it — once, however many app servers open the store at the same moment.
///
/// Everything happens in one transaction (PostgreSQL's DDL is transactional) under a
/// transaction-scoped advisory lock, so the first server to arrive creates the tables and the
/// others wait for it and then find them. A database is never dropped or changed behind the
/// user's back: a database written by another model, or holding tables (or views, sequences,
/// indexes) of the names the store would create that ContextStack did not create, is left
/// exactly as it was and a `StoreError` says what to do.
package enum PostgresSchemaInstaller {
    /// Takes the advisory lock of a ContextStack schema change: "CSTK" and the hashed name of
    /// the schema the tables go in, so that stores in different schemas of one database (one
    /// per app, or per tenant) do not wait for each other's migrations. (A hash shared by two
    /// schemas only makes them wait for each other.)
    package static let lockStatement = "SELECT pg_advisory_xact_lock(\(0x4353_544B), hashtext(current_schema()))"

    package enum Outcome: Equatable, Sendable {
        /// The database was empty of this part: its tables were created.
        case created
        /// The database already held this part, written by the same model.
        case unchanged
        /// The database held this part as an earlier model wrote it: it was migrated.
        case migrated
    }

    /// Installs `schema` with `connection`, which must not be inside a transaction, then runs
    /// `alongside` in the same transaction, under the same lock (the store's history table):
    /// when anything throws, nothing of it stays.
    /// - Throws: `StoreError` with `.modelMismatch` (another model wrote the database and
    ///   `autoMigrating` is false), `.cannotMigrate` (what changed cannot be inferred; see
    ///   `PostgresMigration`), `.foreignDatabase` (tables, views, sequences or indexes of the
    ///   names the store would create exist that ContextStack did not create, or a
    ///   `Z_METADATA` that is not ContextStack's), or `.cannotOpen` (a name longer than
    ///   PostgreSQL keeps; an object ContextStack did not create that depends on what the
    ///   migration drops, 2BP01); `PostgresError` when the server fails.
    package static func install(_ schema: StoreSchema, on connection: PostgresConnection, autoMigrating: Bool,
                                alongside: (PostgresConnection) throws -> Void = { _ in }) throws -> Outcome {
        precondition(!connection.isInTransaction, "Install the schema on a connection outside any transaction: it runs in one of its own.")
        // At READ COMMITTED whatever the server's default: each statement after the advisory
        // lock sees what the server that held it committed. (Under a default of REPEATABLE
        // READ the snapshot was taken by the lock's own statement, before the wait, and a
        // server that waited did not see the tables the first one made.)
        try connection.execute(PostgresStore.beginWrite)
        do {
            try connection.execute(lockStatement)
            let outcome = try installLocked(schema, on: connection, autoMigrating: autoMigrating)
            try alongside(connection)
            try connection.execute("COMMIT")
            return outcome
        } catch {
            if connection.isInTransaction && !connection.isBroken { try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    private static func installLocked(_ schema: StoreSchema, on connection: PostgresConnection, autoMigrating: Bool) throws -> Outcome {
        let server = connection.settings.redactedURL
        let tooLong = schema.postgresIdentifiersTooLong
        guard tooLong.isEmpty else {
            throw StoreError(.cannotOpen, "PostgreSQL keeps identifiers of at most \(StoreSchema.postgresIdentifierLimit) bytes and would shorten \(tooLong.joined(separator: ", ")) without a word, so two names could become one: rename them (with originalName: on SQLite stores, to keep their data).")
        }
        let hasMetadata = try exists("Z_METADATA", on: connection)
        if hasMetadata, try !metadataIsContextStacks(on: connection) {
            throw StoreError(.foreignDatabase, "The PostgreSQL database \(server) already has a table named Z_METADATA that ContextStack did not create: it was left untouched. Use a database (or schema, with ?options=-csearch_path=…) of its own for the store.")
        }
        var stored: String?
        if hasMetadata {
            try connection.query("SELECT value FROM \"Z_METADATA\" WHERE key = ?", [.text(schema.postgresHashKey)]) { stored = $0.value(0).stringValue }
        }
        guard let stored else {
            // This part is not in the database yet (another configuration's may be). A table,
            // view, sequence or index of a name it would create is someone else's; so is a
            // history table in a database without ContextStack's metadata, since the two are
            // made in one transaction.
            var ours = schema.tables.flatMap { [$0.name, StoreSchema.sequenceName(of: $0)] } + schema.joinTables.map(\.name) + schema.indexes.map(\.name)
            if !hasMetadata { ours += ["Z_METADATA", "Z_HISTORY"] }
            let present = try relations(named: ours, on: connection)
            if !present.isEmpty {
                let owner = hasMetadata ? "that this part of the model did not create (another configuration's, or someone else's)" : "that ContextStack did not create"
                throw StoreError(.foreignDatabase, "The PostgreSQL database \(server) already has tables (or views, sequences or indexes) named \(present.sorted().joined(separator: ", ")) \(owner): they were left untouched. Use a database (or schema, with ?options=-csearch_path=…) of its own for the store.")
            }
            // One round trip: the statements travel together, in the transaction.
            let statements = (hasMetadata ? [] : [StoreSchema.postgresMetadataTable]) + schema.postgresPartStatements + [schema.postgresMetadataStatement]
            try connection.execute(statements.joined(separator: ";\n"))
            return .created
        }
        if stored == schema.hash { return .unchanged }
        if !autoMigrating {
            throw StoreError(.modelMismatch, "The PostgreSQL database \(server) was written by a different model, and autoMigrating is false: open it with the model that wrote it, or with autoMigrating: true.")
        }
        var description: String?
        try connection.query("SELECT value FROM \"Z_METADATA\" WHERE key = ?", [.text(schema.postgresSchemaKey)]) { description = $0.value(0).stringValue }
        guard let description else {
            throw StoreError(.cannotMigrate, "The PostgreSQL database \(server) was written by a different model and does not record it, so what changed cannot be inferred: the database was left as it was. Open it with the model that wrote it.")
        }
        var recorded: String?
        try connection.query("SELECT value FROM \"Z_METADATA\" WHERE key = ?", [.text(schema.postgresModelsKey)]) { recorded = $0.value(0).stringValue }
        let history = ModelHistory(recorded: recorded, current: stored)
        // A statement of a migration may take long (an index built on a large table), and must
        // not be cancelled for it: the next server to start would try again and fail again. What
        // is bounded instead is each wait for a lock, by the statement timeout the session has:
        // an `ALTER TABLE` waiting behind a long transaction would hold up every statement on
        // the table queued behind it.
        try connection.execute("SELECT set_config('lock_timeout', current_setting('statement_timeout'), true), set_config('statement_timeout', '0', true)")
        // Nor does the client give up on a long statement's answer meanwhile.
        let answerLimit = connection.answerLimit
        connection.answerLimit = nil
        defer { connection.answerLimit = answerLimit }
        // Refused, `install` rolls back whatever the migration did.
        do {
            try history.migrate(to: schema.hash, store: "The PostgreSQL database \(server)") { dryRun in
                var migration = try PostgresMigration(connection: connection, schema: schema, oldDescription: description, dryRun: dryRun)
                try migration.run()
                return migration.lost
            }
        } catch let error as PostgresError where error.code == .dependentObjectsStillExist {
            // Someone else's view (or another object PostgreSQL tracks) uses what the
            // migration drops (a rename takes it along): not the model's doing, as on SQLite.
            // The detail names the objects, never data.
            throw StoreError(.cannotOpen, "Migrating the PostgreSQL database \(server) failed: an object ContextStack did not create uses a column or table the migration drops (\(error.message)\(error.detail.map { "; \($0)" } ?? "")). The database was left as it was; drop or change that object, then open the store again.", underlying: error)
        }
        try connection.run("UPDATE \"Z_METADATA\" SET value = ? WHERE key = ?", [.text(history.moved(to: schema.hash).text), .text(schema.postgresModelsKey)])
        return .migrated
    }

    /// Whether the `Z_METADATA` table in the connection's current schema is ContextStack's: it
    /// has text columns `key` and `value`, and the rows every ContextStack store has written
    /// since the first, with the table, in one transaction — `format` and a part's hash. Keys
    /// it does not know are let be: a later version may add some, and an earlier one must
    /// still open the database (to refuse a newer model, or migrate). Another program's
    /// key-value table of that name is left alone.
    private static func metadataIsContextStacks(on connection: PostgresConnection) throws -> Bool {
        try connection.scalar(Self.metadataColumns) == .integer(2) && connection.scalar(Self.metadataKeys) == .integer(1)
    }

    /// How many of the text columns ContextStack's `Z_METADATA` has the one in the
    /// connection's current schema has (2 when it is ContextStack's).
    private static let metadataColumns = "SELECT count(*) FROM pg_attribute WHERE attrelid = '\"Z_METADATA\"'::regclass AND attname IN ('key', 'value') AND atttypid = 'text'::regtype AND attnum > 0 AND NOT attisdropped"

    /// 1 when `Z_METADATA` has a `format` row and a hash (`hash`, or `hash:` and a
    /// configuration's name); 0 otherwise. (`COLLATE "C"`: another program's column may have a
    /// collation `~` refuses.)
    private static let metadataKeys = """
        SELECT CASE WHEN count(*) FILTER (WHERE key COLLATE "C" = 'format') > 0
                     AND count(*) FILTER (WHERE key COLLATE "C" ~ '^hash(:.*)?$') > 0 THEN 1 ELSE 0 END FROM "Z_METADATA"
        """

    /// Which of `names` a table, view, sequence or index of the connection's current schema has.
    private static func relations(named names: [String], on connection: PostgresConnection) throws -> [String] {
        guard !names.isEmpty else { return [] }
        var present: [String] = []
        let placeholders = Array(repeating: "?", count: names.count).joined(separator: ", ")
        // The schema by name: `current_schema()::regnamespace` would read it as an identifier
        // (`Tenant` as `tenant`, `tenant-1` not at all).
        try connection.query("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname IN (\(placeholders))",
                             names.map(Value.text)) { present.append($0.value(0).stringValue ?? "") }
        return present
    }

    /// Whether a table of that name exists in the connection's current schema.
    private static func exists(_ table: String, on connection: PostgresConnection) throws -> Bool {
        try connection.scalar("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", [.text(table)]) != .integer(0)
    }
}
