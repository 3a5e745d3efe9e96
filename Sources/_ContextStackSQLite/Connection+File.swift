import _ContextStackCore
import CSQLite

/// Reading and resetting the database file itself, always through SQLite.
///
/// POSIX advisory locks belong to a process, not to a descriptor: closing *any* descriptor on
/// a file drops every lock the process holds on it ("How To Corrupt An SQLite Database File",
/// section 2.2). A `FileHandle` opened and closed on a store file while one of the process's
/// connections is in WAL mode silently drops that connection's shared lock; another process
/// that closes the file then believes it is the last user, checkpoints and deletes the
/// write-ahead log, and the first process goes on committing into a deleted file. SQLite's own
/// file layer keeps one descriptor per file per process and defers closing it while any
/// connection holds a lock, so reading through it is safe where a descriptor of our own is not.
extension Connection {
    /// The first `count` bytes of the main database file (fewer when the file is shorter) and
    /// the file's size, read through SQLite's handle on the file without a lock.
    ///
    /// For example, a store checks the header's magic string before any statement runs:
    ///
    /// ```swift
    /// let probe = try Connection(path: path, readOnly: true, create: false)
    /// let (header, size) = try probe.fileHeader(count: 100)
    /// ```
    package func fileHeader(count: Int) throws(SQLiteError) -> (bytes: [UInt8], fileSize: Int64) {
        var pointer: UnsafeMutablePointer<sqlite3_file>?
        let code = withUnsafeMutablePointer(to: &pointer) {
            sqlite3_file_control(handle, "main", SQLITE_FCNTL_FILE_POINTER, UnsafeMutableRawPointer($0))
        }
        guard code == SQLITE_OK, let file = pointer, let methods = file.pointee.pMethods,
              let fileSize = methods.pointee.xFileSize, let read = methods.pointee.xRead else {
            throw SQLiteError(code: .init(rawValue: code == SQLITE_OK ? SQLITE_CANTOPEN : code),
                              message: "SQLite has not opened the file at \(path)")
        }
        var size: sqlite3_int64 = 0
        let sizeCode = fileSize(file, &size)
        guard sizeCode == SQLITE_OK else {
            throw SQLiteError(code: .init(rawValue: sizeCode), message: "Cannot read the size of \(path)")
        }
        let length = Int(min(Int64(count), size))
        var bytes = [UInt8](repeating: 0, count: length)
        if length > 0 {
            let readCode = bytes.withUnsafeMutableBytes { read(file, $0.baseAddress, Int32(length), 0) }
            guard readCode == SQLITE_OK else {
                throw SQLiteError(code: .init(rawValue: readCode), message: "Cannot read the header of \(path)")
            }
        }
        return (bytes, size)
    }

    /// Whether SQLite opened the main database read-only (asked to, or because the process may
    /// not write the file).
    package var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    /// Empties the database — no schema, no rows — through SQLite, so that other connections
    /// (of this process or others) see an empty database instead of losing a file under them.
    ///
    /// A readable database drops its tables and views in one write transaction, which waits
    /// for other connections like any write. A damaged one, whose schema cannot be read, is
    /// reset the way SQLite documents for that (`SQLITE_DBCONFIG_RESET_DATABASE`, then
    /// `VACUUM`), which needs every other connection to the file closed.
    package func eraseDatabase() throws {
        do {
            try writeTransaction {
                let objects = try rows("""
                    SELECT type, name FROM sqlite_master
                    WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
                    """)
                // Dropping a table drops its indexes and triggers with it.
                for object in objects {
                    guard let type = object[0].stringValue, let name = object[1].stringValue else { continue }
                    try execute("DROP \(type == "view" ? "VIEW" : "TABLE") IF EXISTS main.\(name.quotedIdentifier)")
                }
            }
        } catch let error as SQLiteError where error.code.primary == .corrupt || error.code.primary == .notADatabase {
            try resetDamagedDatabase()
        }
    }

    private func resetDamagedDatabase() throws(SQLiteError) {
        let code = cs_sqlite3_set_reset_database(handle, 1)
        guard code == SQLITE_OK else { throw error(code, sql: nil) }
        do {
            try execute("VACUUM")
        } catch {
            _ = cs_sqlite3_set_reset_database(handle, 0)
            throw error
        }
        let off = cs_sqlite3_set_reset_database(handle, 0)
        guard off == SQLITE_OK else { throw self.error(off, sql: nil) }
    }
}
