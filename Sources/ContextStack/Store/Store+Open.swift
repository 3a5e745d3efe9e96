import Foundation

/// How a store file is opened: checks that never write to a file ContextStack did not create,
/// the schema check, migration and reset.
extension Store {
    /// How a file store is opened.
    struct OpenOptions: Sendable {
        var autoMigrating = true
        var resetOnFailure = false
    }

    /// Opens (or creates) the store file at `url` for `schema`, migrating or resetting it as
    /// `options` allow, and returns its connection.
    static func openFile(_ url: URL, schema: StoreSchema, options: OpenOptions) throws -> Connection {
        do {
            return try openAndPrepare(url, schema: schema, options: options)
        } catch let error as StoreError where options.resetOnFailure && error.code.allowsReset {
            try removeStoreFiles(at: url)
            return try openAndPrepare(url, schema: schema, options: options)
        }
    }

    /// Deletes the store file and the files SQLite keeps beside it.
    static func removeStoreFiles(at url: URL) throws {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let path = url.path + suffix
            guard FileManager.default.fileExists(atPath: path) else { continue }
            do {
                try FileManager.default.removeItem(atPath: path)
            } catch {
                throw StoreError(.permissionDenied, "Cannot delete \(path) to reset the store: \(error.localizedDescription)")
            }
        }
    }

    private static func openAndPrepare(_ url: URL, schema: StoreSchema, options: OpenOptions) throws -> Connection {
        let path = url.path
        try checkHeader(of: url)
        let connection: Connection
        do {
            connection = try Connection(path: path)
        } catch {
            throw openError(error, url: url)
        }
        connection.setBusyTimeout(milliseconds: busyTimeout)
        do {
            // Before anything writes (even the journal mode is written into the file).
            try refuseForeignDatabase(connection, path: path)
            let mode = try connection.scalar("PRAGMA journal_mode = WAL").stringValue
            if mode?.lowercased() != "wal" {
                throw StoreError(.cannotOpen, "The store at \(path) cannot use write-ahead logging (journal mode is \(mode ?? "unknown")).")
            }
            try connection.execute("PRAGMA synchronous = NORMAL")
            try prepareSchema(connection, schema: schema, options: options, path: path)
        } catch let error as SQLiteError {
            throw openError(error, url: url)
        }
        return connection
    }

    /// How long a statement waits for another connection (or process) to finish writing.
    static let busyTimeout: Int32 = 10_000

    /// Throws `foreignDatabase` for an SQLite database that ContextStack did not create.
    private static func refuseForeignDatabase(_ db: Connection, path: String) throws {
        let hasMetadata = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'Z_METADATA'").int64Value == 1
        let tableCount = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").int64Value ?? 0
        if !hasMetadata && tableCount > 0 {
            // Someone else's database: never adopt it, never drop its tables.
            throw StoreError(.foreignDatabase, "The file at \(path) holds an SQLite database that ContextStack did not create (it has \(tableCount) tables and no Z_METADATA); choose another file.")
        }
    }

    /// Creates the tables of a new store, or checks (and migrates) an existing one.
    static func prepareSchema(_ db: Connection, schema: StoreSchema, options: OpenOptions, path: String) throws {
        try db.writeTransaction {
            let hasMetadata = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'Z_METADATA'").int64Value == 1
            let tableCount = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").int64Value ?? 0
            if !hasMetadata && tableCount > 0 {
                // Someone else's database: never adopt it, never drop its tables.
                throw StoreError(.foreignDatabase, "The file at \(path) holds an SQLite database that ContextStack did not create (it has \(tableCount) tables and no Z_METADATA); choose another file.")
            }
            guard hasMetadata else {
                for statement in schema.creationStatements() { try db.execute(statement) }
                return
            }
            let storedHash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'").stringValue
            if storedHash == schema.hash { return }
            guard options.autoMigrating else {
                throw StoreError(.modelMismatch, "The store at \(path) was written by a different model (hash \(storedHash ?? "none"), this model \(schema.hash)). Open it with autoMigrating: true to migrate it, with the model that wrote it, or with resetOnFailure: true to replace it with an empty store.")
            }
            guard let description = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'schema'").stringValue else {
                throw StoreError(.cannotMigrate, "The store at \(path) does not record the model that wrote it, so it cannot be migrated; open it with resetOnFailure: true to replace it with an empty store.")
            }
            var migration = try Migration(db: db, schema: schema, oldDescription: description)
            do {
                try migration.run()
            } catch let error as SQLiteError {
                throw StoreError(.cannotMigrate, "Migrating the store at \(path) failed; the file is unchanged.", underlying: error)
            }
        }
    }

    // MARK: - Bad files

    /// Refuses, before SQLite touches it, a file that is not an SQLite database, and a database
    /// file shorter than its header says (truncated).
    private static func checkHeader(of url: URL) throws {
        let path = url.path
        let manager = FileManager.default
        var isDirectory: ObjCBool = false
        guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else { return }
        if isDirectory.boolValue {
            throw StoreError(.cannotOpen, "\(path) is a directory; give addDatabaseStore the URL of a file inside it.")
        }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw StoreError(.permissionDenied, "Cannot read \(path): check the file's permissions.")
        }
        defer { try? handle.close() }
        let header = (try? handle.read(upToCount: 100)) ?? Data()
        if header.isEmpty { return }  // An empty file is an empty database.
        guard header.count == 100, header.prefix(16) == sqliteMagic else {
            throw StoreError(.notADatabase, "The file at \(path) is not an SQLite database; ContextStack leaves it untouched. Choose another file.")
        }
        // Truncation: the header's page count is trusted only when it is current ("version
        // valid for" equals the change counter), and only when no write-ahead log holds pages
        // that a checkpoint has yet to copy into the file.
        func integer(_ offset: Int, _ size: Int) -> UInt64 {
            header[offset..<(offset + size)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        let rawPageSize = integer(16, 2)
        let pageSize = rawPageSize == 1 ? 65_536 : rawPageSize
        let pageCount = integer(28, 4)
        let headerIsCurrent = integer(24, 4) == integer(92, 4)
        let walSize = (try? manager.attributesOfItem(atPath: path + "-wal")[.size] as? UInt64) ?? 0
        let size = (try? manager.attributesOfItem(atPath: path)[.size] as? UInt64) ?? 0
        if headerIsCurrent && walSize == 0 && pageCount > 0 && size < pageCount * pageSize {
            throw StoreError(.corrupt, "The store at \(path) is truncated: its header counts \(pageCount) pages of \(pageSize) bytes, the file has \(size) bytes. Restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.")
        }
    }

    private static let sqliteMagic = Data("SQLite format 3\0".utf8)

    private static func hasSQLiteHeader(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        return (try? handle.read(upToCount: 16)) == sqliteMagic
    }

    /// A `StoreError` for an SQLite error met while opening `url`, saying what to do.
    private static func openError(_ error: any Error, url: URL) -> any Error {
        guard let error = error as? SQLiteError else { return error }
        let path = url.path
        let directory = url.deletingLastPathComponent().path
        let manager = FileManager.default
        switch error.code.primary {
        case .notADatabase where hasSQLiteHeader(path):
            // The header said SQLite (checked before opening): the rest is damaged.
            return StoreError(.corrupt, "The store at \(path) is damaged. Restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        case .notADatabase:
            return StoreError(.notADatabase, "The file at \(path) is not an SQLite database; ContextStack leaves it untouched. Choose another file.", underlying: error)
        case .corrupt:
            return StoreError(.corrupt, "The store at \(path) is damaged. Restore it from a backup, or open it with resetOnFailure: true to replace it with an empty store.", underlying: error)
        case .readOnly, .permission, .cantOpen, .ioError:
            var isDirectory: ObjCBool = false
            if !manager.fileExists(atPath: directory, isDirectory: &isDirectory) || !isDirectory.boolValue {
                return StoreError(.cannotOpen, "Cannot create the store at \(path): the directory \(directory) does not exist.", underlying: error)
            }
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
