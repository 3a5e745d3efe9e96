import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// How a store file is opened: checks that never write to a file ContextStack did not create,
/// the schema check, migration and reset.
extension SQLiteStore {
    /// How a file store is opened.
    package struct OpenOptions: Sendable {
        var autoMigrating = true
        var resetOnFailure = false
        /// Create the history tables (Docs/History.md); a file that has them tracks history anyway.
        var tracksHistory = false

        package init(autoMigrating: Bool = true, resetOnFailure: Bool = false, tracksHistory: Bool = false) {
            self.autoMigrating = autoMigrating
            self.resetOnFailure = resetOnFailure
            self.tracksHistory = tracksHistory
        }
    }

    /// Opens (or creates) the store file at `url` for `schema`, migrating or resetting it as
    /// `options` allow, and returns its connection.
    ///
    /// Nothing here opens, reads, locks or closes the file, its `-wal` or its `-shm` other
    /// than through SQLite (see `Connection+File.swift` for why): other stacks of this process
    /// may hold connections on it.
    static func openFile(_ url: URL, schema: StoreSchema, options: OpenOptions) throws -> Connection {
        do {
            return try openAndPrepare(url, schema: schema, options: options)
        } catch let error as StoreError where options.resetOnFailure && error.code.allowsReset {
            try eraseStore(at: url)
            return try openAndPrepare(url, schema: schema, options: options)
        }
    }

    /// Empties the store at `url` (no tables, no rows) for `resetOnFailure`.
    ///
    /// Through SQLite rather than by deleting the files: a connection that another stack or
    /// process holds on the file then finds an empty database, instead of writing on into a
    /// deleted one while every new connection sees a new file.
    static func eraseStore(at url: URL) throws {
        do {
            let db = try Connection(path: url.path, create: false)
            db.setBusyTimeout(milliseconds: busyTimeout)
            if db.isReadOnly {
                throw StoreError(.permissionDenied, "Cannot reset the store at \(url.path): the file is read-only for this process. Make it writable.")
            }
            try db.eraseDatabase()
        } catch let error as SQLiteError {
            throw StoreError(.cannotOpen, "Cannot reset the store at \(url.path).", underlying: error)
        }
    }

    private static func openAndPrepare(_ url: URL, schema: StoreSchema, options: OpenOptions) throws -> Connection {
        let path = url.path
        let contents = try inspectFile(at: url)
        let connection: Connection
        do {
            connection = try Connection(path: path)
        } catch {
            throw openError(error, url: url, contents: contents)
        }
        connection.setBusyTimeout(milliseconds: busyTimeout)
        do {
            if connection.isReadOnly {
                // SQLite falls back to read-only when the file is not writable; a store must
                // write (its commits, its -wal), so say so now rather than at the first commit.
                throw StoreError(.permissionDenied, "Cannot open the store at \(path) for writing: the file is read-only for this process. Make it writable by this user, or copy it somewhere writable.")
            }
            // Before anything writes (even the journal mode is written into the file).
            _ = try refuseForeignDatabase(connection, path: path)
            try switchToWriteAheadLogging(connection, path: path)
            try connection.execute("PRAGMA synchronous = NORMAL")
            try prepareSchema(connection, schema: schema, options: options, path: path)
        } catch let error as SQLiteError {
            throw openError(error, url: url, contents: contents)
        }
        return connection
    }

    /// How long a statement waits for another connection (or process) to finish writing.
    static let busyTimeout: Int32 = 10_000

    /// Switches the database to write-ahead logging, waiting up to the busy timeout for other
    /// connections.
    ///
    /// A new file starts in rollback-journal mode, where the switch needs an exclusive lock.
    /// When two processes switch one new file at the same moment, each holds the shared lock
    /// the other must see gone, and SQLite answers `SQLITE_BUSY` at once instead of calling
    /// the busy handler (waiting would deadlock). No transaction is open here, so trying again
    /// after a short pause is safe, and the busy timeout bounds it like any other wait.
    private static func switchToWriteAheadLogging(_ db: Connection, path: String) throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(busyTimeout))
        var pause: UInt32 = 1_000
        while true {
            do {
                let mode = try db.scalar("PRAGMA journal_mode = WAL").stringValue
                if mode?.lowercased() != "wal" {
                    throw StoreError(.cannotOpen, "The store at \(path) cannot use write-ahead logging (journal mode is \(mode ?? "unknown")).")
                }
                return
            } catch let error as SQLiteError where error.code.primary == .busy && ContinuousClock.now < deadline {
                usleep(UInt32.random(in: pause / 2...pause))
                pause = min(pause * 2, 50_000)
            }
        }
    }

    /// Throws `foreignDatabase` for an SQLite database that ContextStack did not create: one
    /// with any table, view, index or trigger but no `Z_METADATA`. Returns whether the database
    /// is a ContextStack store (false for an empty database).
    private static func refuseForeignDatabase(_ db: Connection, path: String) throws -> Bool {
        // One statement, so one snapshot: another process may create the schema between two.
        let row = try db.rows("""
            SELECT coalesce(sum(type = 'table' AND name = 'Z_METADATA'), 0), count(*) FROM sqlite_master
            WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
            """)[0]
        if row[0].int64Value == 1 { return true }
        let objects = row[1].int64Value ?? 0
        if objects > 0 {
            // Someone else's database: never adopt it, never drop its tables.
            throw StoreError(.foreignDatabase, "The file at \(path) holds an SQLite database that ContextStack did not create (it has \(objects) tables, views, indexes or triggers, and no Z_METADATA table); ContextStack leaves it untouched. Choose another file.")
        }
        return false
    }

    /// Creates the tables of a new store, or checks (and migrates) an existing one.
    static func prepareSchema(_ db: Connection, schema: StoreSchema, options: OpenOptions, path: String) throws {
        try db.writeTransaction {
            // Again under the write lock: another process may have created the file's schema
            // since the first look.
            guard try refuseForeignDatabase(db, path: path) else {
                for statement in schema.creationStatements() { try db.execute(statement) }
                return
            }
            let storedHash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'").stringValue
            if storedHash == schema.hash { return }
            let history = ModelHistory(recorded: try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'models'").stringValue,
                                       current: storedHash ?? "")
            do {
                try migrate(db, schema: schema, history: history, storedHash: storedHash, options: options, path: path)
            } catch let error as StoreError where error.code.allowsReset && history.isOlder(schema.hash) {
                // A newer version wrote this store: `resetOnFailure` must not erase what it wrote
                // because an older one cannot open it.
                throw StoreError(.newerModel, error.message + " A newer version of the app migrated this store, and this model is one it had before: it is not reset, even with resetOnFailure. Run the newer version.", underlying: error.underlying)
            }
        }
    }

    /// Migrates the store from the model that wrote it (`storedHash`) to `schema`, refusing a
    /// return to an older model that would drop what a newer one wrote (`ModelHistory`).
    private static func migrate(_ db: Connection, schema: StoreSchema, history: ModelHistory, storedHash: String?,
                                options: OpenOptions, path: String) throws {
        guard options.autoMigrating else {
            throw StoreError(.modelMismatch, "The store at \(path) was written by a different model (hash \(storedHash ?? "none"), this model \(schema.hash)). Open it with autoMigrating: true to migrate it, with the model that wrote it, or with resetOnFailure: true to replace it with an empty store.")
        }
        guard let description = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'schema'").stringValue else {
            throw StoreError(.cannotMigrate, "The store at \(path) does not record the model that wrote it, so it cannot be migrated; open it with resetOnFailure: true to replace it with an empty store.")
        }
        do {
            try history.migrate(to: schema.hash, store: "The store at \(path)") { dryRun in
                var migration = try Migration(db: db, schema: schema, oldDescription: description, dryRun: dryRun)
                try migration.run()
                return migration.lost
            }
        } catch let error as SQLiteError {
            throw migrationFailure(error, path: path)
        } catch let conflict as ForeignObjectConflict {
            throw StoreError(.cannotOpen, "Migrating the store at \(path) failed: \(conflict.problem). The file is unchanged and is not reset, even with resetOnFailure; \(conflict.remedy).", underlying: conflict.underlying)
        }
        try db.execute("INSERT OR REPLACE INTO Z_METADATA (key, value) VALUES ('models', ?)", [.text(history.moved(to: schema.hash).text)])
    }

    /// The `StoreError` for an SQLite error that stopped a migration (the transaction rolled
    /// back, so the file is unchanged).
    ///
    /// A full disk, an I/O error, too little memory or a lock held too long says nothing about
    /// the store: erasing it for that (`resetOnFailure` answers `.cannotMigrate` so) would
    /// trade good data for an empty file. Those are `.cannotOpen` (`.permissionDenied` for a
    /// file that may not be written), and the next open, once the cause is gone, migrates.
    /// Damage stays `.corrupt`. Every other failure comes from what the file holds (rows the
    /// new model cannot take) and fails again at every open: `.cannotMigrate`, as before.
    /// (Another program's objects that stop a migration are not the model either: the
    /// migration says so with `ForeignObjectConflict`, which is `.cannotOpen`.)
    private static func migrationFailure(_ error: SQLiteError, path: String) -> StoreError {
        switch error.code.primary {
        case .full, .ioError, .noMemory, .busy, .locked, .interrupt, .cantOpen:
            return StoreError(.cannotOpen, "Migrating the store at \(path) failed for a reason that is not the model (a full disk, an I/O error, too little memory, a lock another connection held too long: see underlying). The file is unchanged and is not reset, even with resetOnFailure; remove the cause and open it again.", underlying: error)
        case .readOnly, .permission:
            return StoreError(.permissionDenied, "Migrating the store at \(path) failed: the file or its directory may not be written. The file is unchanged; make them writable and open it again.", underlying: error)
        case .corrupt, .notADatabase:
            return StoreError(.corrupt, "The store at \(path) is damaged: the migration met pages SQLite cannot read. The file is unchanged; restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        default:
            return StoreError(.cannotMigrate, "Migrating the store at \(path) failed; the file is unchanged. Open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        }
    }

    // MARK: - Bad files

    /// What a store file holds, as far as opening it is concerned.
    enum FileContents {
        /// No file yet: SQLite creates it.
        case absent
        /// Zero bytes: SQLite's empty database, used as a new store.
        case empty
        /// A file that starts with SQLite's header.
        case sqliteHeader
    }

    /// Refuses, before SQLite reads or writes it as a database, a file that is not one: a
    /// directory, or a file that does not start with SQLite's 100-byte header (a file shorter
    /// than that included). A zero-byte file is SQLite's empty database and is used as a new
    /// store. Truncation and damage behind the header are SQLite's to find, on the first read.
    ///
    /// The header is read through SQLite's own handle on the file (`Connection.fileHeader`),
    /// never through a descriptor of ours (see `Connection+File.swift`).
    private static func inspectFile(at url: URL) throws -> FileContents {
        let path = url.path
        var isDirectory: ObjCBool = false
        // `stat`, which opens nothing.
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return .absent }
        if isDirectory.boolValue {
            throw StoreError(.cannotOpen, "\(path) is a directory; give addDatabaseStore the URL of a file inside it.")
        }
        let header: [UInt8]
        let size: Int64
        do {
            let probe = try Connection(path: path, readOnly: true, create: false)
            (header, size) = try probe.fileHeader(count: 100)
        } catch {
            throw openError(error, url: url, contents: nil)
        }
        if size == 0 { return .empty }
        guard header.count == 100, header.starts(with: sqliteMagic) else {
            throw StoreError(.notADatabase, "The file at \(path) is not an SQLite database; ContextStack leaves it untouched. Choose another file.")
        }
        return .sqliteHeader
    }

    private static let sqliteMagic = Array("SQLite format 3\0".utf8)

    /// For a database whose schema SQLite could not load: how many objects its schema table
    /// lists when it has some and no `Z_METADATA` (someone else's database, written with syntax
    /// this SQLite does not know, as a `STRICT` table is to one before 3.37), or `nil` (a store
    /// of ContextStack's whose schema is damaged, or pages that cannot be read at all).
    ///
    /// Read with `writable_schema` on, which makes SQLite pass over the entries it cannot
    /// parse, on a read-only connection that writes nothing.
    private static func foreignObjectsInUnreadableSchema(at path: String) -> Int64? {
        guard let probe = try? Connection(path: path, readOnly: true, create: false),
              (try? probe.execute("PRAGMA writable_schema = ON")) != nil,
              let row = try? probe.rows("""
                  SELECT coalesce(sum(type = 'table' AND name = 'Z_METADATA'), 0), count(*) FROM sqlite_master
                  WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
                  """).first,
              row[0].int64Value == 0, let objects = row[1].int64Value, objects > 0 else { return nil }
        return objects
    }

    /// A `StoreError` for an SQLite error met while opening `url`, saying what to do.
    /// `contents` is what `inspectFile` found, when it got that far.
    private static func openError(_ error: any Error, url: URL, contents: FileContents?) -> any Error {
        guard let error = error as? SQLiteError else { return error }
        let path = url.path
        let directory = url.deletingLastPathComponent().path
        let manager = FileManager.default
        if error.code.primary == .corrupt || (error.code.primary == .notADatabase && contents == .sqliteHeader),
           let objects = foreignObjectsInUnreadableSchema(at: path) {
            return StoreError(.foreignDatabase, "The file at \(path) holds an SQLite database that ContextStack did not create (its schema lists \(objects) tables, views, indexes or triggers, and no Z_METADATA table), in a form this SQLite cannot read (a newer SQLite's, perhaps); ContextStack leaves it untouched. Choose another file.", underlying: error)
        }
        switch error.code.primary {
        case .notADatabase where contents == .sqliteHeader:
            // The header said SQLite (checked before opening): the rest is damaged.
            return StoreError(.corrupt, "The store at \(path) is damaged. Restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        case .notADatabase:
            return StoreError(.notADatabase, "The file at \(path) is not an SQLite database; ContextStack leaves it untouched. Choose another file.", underlying: error)
        case .corrupt:
            return StoreError(.corrupt, "The store at \(path) is damaged (truncated, or pages SQLite cannot read). Restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        case .readOnly, .permission, .cantOpen, .ioError:
            var isDirectory: ObjCBool = false
            if !manager.fileExists(atPath: directory, isDirectory: &isDirectory) || !isDirectory.boolValue {
                return StoreError(.cannotOpen, "Cannot create the store at \(path): the directory \(directory) does not exist.", underlying: error)
            }
            // `access(2)`, which opens nothing.
            if !manager.isWritableFile(atPath: directory) {
                return StoreError(.permissionDenied, "Cannot open the store at \(path): the directory is read-only, and a store needs to create \(url.lastPathComponent)-wal and -shm beside the file. Use a writable directory.", underlying: error)
            }
            if manager.fileExists(atPath: path) && !(manager.isReadableFile(atPath: path) && manager.isWritableFile(atPath: path)) {
                return StoreError(.permissionDenied, "Cannot open the store at \(path): the file is not readable and writable by this process. Check its permissions.", underlying: error)
            }
            if error.code.primary == .readOnly {
                return StoreError(.permissionDenied, "Cannot write the store at \(path): the file or its directory is read-only.", underlying: error)
            }
            return StoreError(.cannotOpen, "Cannot open or create the store at \(path).", underlying: error)
        default:
            return StoreError(.cannotOpen, "Cannot open the store at \(path).", underlying: error)
        }
    }
}

extension StoreError.Code {
    /// Failures that `resetOnFailure: true` answers by replacing the file with an empty store:
    /// a ContextStack store of an incompatible model, and a damaged SQLite database. Never a
    /// file that is not an SQLite database, nor someone else's database.
    var allowsReset: Bool { self == .modelMismatch || self == .cannotMigrate || self == .corrupt }
}
