import _ContextStackCore
import CSQLite
import Foundation

/// One SQLite connection: a handle plus its cache of prepared statements.
///
/// A `Connection` is not thread-safe and says so by not being `Sendable`: the `ConnectionPool`
/// that owns it hands it out to one caller at a time. Its state has no run-time exclusivity
/// checks (`@exclusivity(unchecked)`) for that reason: one caller uses it at a time and none
/// of its methods calls out while it changes that state; the checks (`swift_beginAccess`, a
/// look-up in the thread's access set) were four of a small query's fifteen.
package final class Connection {
    package let handle: OpaquePointer
    package let path: String
    @exclusivity(unchecked) private var statements: [String: Statement] = [:]
    /// Past this many cached statements the cache starts over (generated SQL varies, in
    /// `IN (…)` lists for instance, and must not grow the cache without bound).
    package static let statementCacheLimit = 512
    /// The statements used last, looked through before `statements`. A read runs the same few
    /// texts again and again (BEGIN, the snapshot's SELECT, the query, COMMIT), most of them
    /// the very strings used the time before, which compare by identity; other texts compare
    /// byte by byte up to their first difference (generated SQL with a long common start
    /// costs more). Hashing each text with SipHash cost a look-up by key about a tenth of its
    /// instructions.
    @exclusivity(unchecked) private var recent: [(sql: String, statement: Statement)] = []
    @exclusivity(unchecked) private var nextRecent = 0
    private static let recentCount = 8
    /// Asked after the first step of each `select` — once SQLite has taken that statement's
    /// snapshot, before any row reaches the caller — whether the snapshot is the one the read
    /// wants; `false` abandons the select with `SnapshotMoved` and sets `snapshotMoved`. Inside
    /// a transaction it is asked once (the first statement fixes the transaction's snapshot);
    /// outside one, of every statement. A store's read sets it and clears it.
    @exclusivity(unchecked) package var snapshotCheck: (() -> Bool)?
    /// Whether a select was abandoned by `snapshotCheck` since the read that set it began.
    @exclusivity(unchecked) package var snapshotMoved = false

    /// Opens (or creates, when `create` is true) the database at `path`.
    package init(path: String, readOnly: Bool = false, create: Bool = true) throws(SQLiteError) {
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        flags |= readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            if let handle { sqlite3_close_v2(handle) }
            throw SQLiteError(code: .init(rawValue: code), message: message)
        }
        self.handle = handle
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
        try registerFunctions()
        try registerAggregates()
    }

    deinit {
        recent.removeAll()
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// The error SQLite reports for `code` on this connection.
    package func error(_ code: Int32, sql: String?) -> SQLiteError {
        let extended = sqlite3_extended_errcode(handle)
        let message = String(cString: sqlite3_errmsg(handle))
        // sqlite3_errmsg describes the last failing call; trust the code we were given if they differ.
        let reported = (extended & 0xFF) == (code & 0xFF) ? extended : code
        return SQLiteError(code: .init(rawValue: reported), message: message, sql: sql)
    }

    /// The rowid of the row the last successful `INSERT` on this connection made.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// A prepared statement for `sql`, prepared on first use and reused afterwards.
    package func cachedStatement(_ sql: String) throws(SQLiteError) -> Statement {
        for index in recent.indices where recent[index].sql == sql {
            return recent[index].statement
        }
        let statement: Statement
        if let cached = statements[sql] {
            statement = cached
        } else {
            statement = try Statement(connection: self, sql: sql)
            if statements.count >= Self.statementCacheLimit {
                // Statements in use stay alive through their callers' references.
                statements.removeAll(keepingCapacity: true)
                recent.removeAll(keepingCapacity: true)
                nextRecent = 0
            }
            statements[sql] = statement
        }
        if recent.count < Self.recentCount {
            recent.append((sql, statement))
        } else {
            recent[nextRecent] = (sql, statement)
            nextRecent = (nextRecent + 1) % Self.recentCount
        }
        return statement
    }

    /// Set by SQLite's authorizer, once `watchPreparations` installed it, whenever this
    /// connection prepares a statement: a new one, or a cached one again because another
    /// connection changed the schema. Cleared by `takePrepared`.
    private final class Preparations {
        var happened = false
    }
    private let preparations = Preparations()
    /// Whether `watchPreparations` installed its authorizer (`columnsUsed` puts it back).
    private var watchingPreparations = false

    /// Starts noting when this connection prepares statements (`takePrepared`), through
    /// SQLite's authorizer, which runs only while a statement is prepared: nothing per step.
    package func watchPreparations() {
        watchingPreparations = true
        preparations.happened = true
        sqlite3_set_authorizer(handle, { context, _, _, _, _, _ in
            if let context { Unmanaged<Preparations>.fromOpaque(context).takeUnretainedValue().happened = true }
            return SQLITE_OK
        }, Unmanaged.passUnretained(preparations).toOpaque())
    }

    /// Whether a statement was prepared since the last call (`watchPreparations`). A statement
    /// that reads or writes a table after another connection changed the schema is prepared
    /// again, so `false` after a write's statements means the schema did not change.
    package func takePrepared() -> Bool {
        defer { preparations.happened = false }
        return preparations.happened
    }

    /// A column of a table that a statement reads or writes, as SQLite's authorizer reports
    /// it while it compiles the statement, the bodies of the views it reads and the triggers it
    /// fires included.
    package struct ColumnUse: Hashable, Comparable {
        package let table: String
        package let column: String
        package let writes: Bool
        /// The innermost view or trigger responsible for the use: the one whose body uses the
        /// column, or, for an `UPDATE` or `DELETE` of a view, that view; `nil` for the rest of
        /// the statement's own text.
        package let within: String?

        package static func < (a: ColumnUse, b: ColumnUse) -> Bool {
            (a.table, a.column, a.writes ? 1 : 0, a.within ?? "") < (b.table, b.column, b.writes ? 1 : 0, b.within ?? "")
        }
    }

    private final class ColumnUses {
        var uses: Set<ColumnUse> = []
    }

    /// The columns the statements `body` prepares read (`SQLITE_READ`) or update
    /// (`SQLITE_UPDATE`): SQLite's authorizer sees them as it compiles each statement, so a
    /// statement prepared and never run (an `EXPLAIN`, say) is enough, and nothing changes. An
    /// `INSERT`'s columns are not among them (the authorizer names only its table), nor the
    /// columns of a trigger's `UPDATE OF`. The authorizer `watchPreparations` installed, if it
    /// did, is back after, also when `body` throws.
    package func columnsUsed<E: Error>(preparing body: () throws(E) -> Void) throws(E) -> Set<ColumnUse> {
        let collected = ColumnUses()
        sqlite3_set_authorizer(handle, { context, action, table, column, _, within in
            guard let context, action == SQLITE_READ || action == SQLITE_UPDATE, let table, let column else { return SQLITE_OK }
            Unmanaged<ColumnUses>.fromOpaque(context).takeUnretainedValue().uses.insert(
                ColumnUse(table: String(cString: table), column: String(cString: column), writes: action == SQLITE_UPDATE,
                          within: within.map { String(cString: $0) }))
            return SQLITE_OK
        }, Unmanaged.passUnretained(collected).toOpaque())
        defer {
            // Statements were prepared meanwhile, which a watcher must hear of.
            if watchingPreparations { watchPreparations() } else { sqlite3_set_authorizer(handle, nil, nil) }
            // What the authorizer was handed lives until it is taken back.
            withExtendedLifetime(collected) {}
        }
        try body()
        return collected.uses
    }

    /// Whether the schema this connection holds in memory has the table `name` in `database`.
    ///
    /// No statement runs, so nothing checks the schema against the file: another connection's
    /// `CREATE TABLE` shows only after this connection ran a statement that reads or writes a
    /// table since (SQLite compares its schema cookie then, and reloads the schema when it
    /// moved). Inside a write transaction, after such a statement, the answer is the file's.
    package func schemaHasTable(_ name: String, in database: String = "main") -> Bool {
        sqlite3_table_column_metadata(handle, database, name, nil, nil, nil, nil, nil, nil) == SQLITE_OK
    }

    /// How many databases this connection may attach (`SQLITE_LIMIT_ATTACHED`: ten as SQLite
    /// is built by default, up to 125 in a build that raises it).
    package var attachLimit: Int { Int(sqlite3_limit(handle, SQLITE_LIMIT_ATTACHED, -1)) }

    /// Runs one or more statements that return nothing (no parameters).
    ///
    /// A single statement (no `;`) runs through the statement cache: BEGIN, COMMIT and the
    /// savepoints bracket every read and write, and parsing them anew each time with
    /// `sqlite3_exec` cost more than a by-key read itself.
    package func execute(_ sql: String) throws(SQLiteError) {
        if !sql.utf8.contains(UInt8(ascii: ";")) {
            try cachedStatement(sql).execute()
            return
        }
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw error(code, sql: sql) }
    }

    /// Runs `sql` with `arguments` and returns every row as an array of values.
    package func rows(_ sql: String, _ arguments: [Value] = []) throws(SQLiteError) -> [[Value]] {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        var rows: [[Value]] = []
        let count = statement.columnCount
        while try statement.step() {
            rows.append((0..<count).map(statement.column))
        }
        return rows
    }

    /// The first column of the first row, or `.null` when there is no row.
    package func scalar(_ sql: String, _ arguments: [Value] = []) throws(SQLiteError) -> Value {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        return try statement.step() ? statement.column(0) : .null
    }

    /// Sets how long a statement retries on `SQLITE_BUSY` before it fails.
    package func setBusyTimeout(milliseconds: Int32) {
        sqlite3_busy_timeout(handle, milliseconds)
    }

    package var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` inside `BEGIN DEFERRED … COMMIT`: its statements share one snapshot (taken
    /// by the first that reads). The connection is never left inside the transaction, even
    /// when its `COMMIT` fails (it is rolled back then; a read changed nothing): a writer left
    /// there could not `BEGIN IMMEDIATE`, and `data_version` does not move inside one.
    package func readTransaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN DEFERRED")
        defer { if isInTransaction, (try? execute("COMMIT")) == nil { try? execute("ROLLBACK") } }
        return try body()
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws.
    ///
    /// `commit` runs the final `COMMIT`; the store passes a closure that takes its publication
    /// lock around it, so readers never see the store ahead of the pending-change overlay.
    package func writeTransaction<T>(_ body: () throws -> T, commit: ((() throws -> Void) throws -> Void)? = nil) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            if let commit {
                try commit { try self.execute("COMMIT") }
            } else {
                try execute("COMMIT")
            }
            return result
        } catch {
            // The body's (or COMMIT's) error is the one the caller must see. Since SQLite 3.7.11
            // ROLLBACK does not fail for pending statements (they are aborted instead); should
            // it fail all the same, the connection stays inside its transaction, and the next
            // BEGIN IMMEDIATE on it throws, so the failure cannot pass unnoticed.
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// The options SQLite was compiled with (`PRAGMA compile_options`), checked at run time.
    package func compileOptions() throws(SQLiteError) -> Set<String> {
        Set(try rows("PRAGMA compile_options").compactMap { $0.first?.stringValue })
    }
}
