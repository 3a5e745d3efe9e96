import BenchSQLite

/// `SQLITE_TRANSIENT`: SQLite copies bound text before the call returns.
nonisolated(unsafe) private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

struct RawError: Error, CustomStringConvertible {
    let code: Int32
    let message: String
    var description: String { "SQLite error \(code): \(message)" }
}

/// The "raw" contender: the SQLite C API with nothing in between, as a careful hand-written
/// data layer would use it (prepared once, bound and stepped, WAL with synchronous=NORMAL).
final class RawDatabase {
    let handle: OpaquePointer

    init(path: String) throws {
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let handle else { throw RawError(code: code, message: "cannot open \(path)") }
        self.handle = handle
        sqlite3_busy_timeout(handle, 10_000)
        try execute("PRAGMA journal_mode = WAL")
        try execute("PRAGMA synchronous = NORMAL")
    }

    deinit { sqlite3_close_v2(handle) }

    func execute(_ sql: String) throws {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw RawError(code: code, message: String(cString: sqlite3_errmsg(handle))) }
    }

    func prepare(_ sql: String) throws -> RawStatement {
        try RawStatement(db: self, sql: sql)
    }
}

final class RawStatement {
    let handle: OpaquePointer
    let db: RawDatabase

    init(db: RawDatabase, sql: String) throws {
        var handle: OpaquePointer?
        let code = sqlite3_prepare_v3(db.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &handle, nil)
        guard code == SQLITE_OK, let handle else {
            throw RawError(code: code, message: "\(String(cString: sqlite3_errmsg(db.handle))) in \(sql)")
        }
        self.handle = handle
        self.db = db
    }

    deinit { sqlite3_finalize(handle) }

    @inline(__always) func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    @inline(__always) func bind(_ index: Int32, _ value: Int) { sqlite3_bind_int64(handle, index, Int64(value)) }
    @inline(__always) func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(handle, index, value) }
    @inline(__always) func bind(_ index: Int32, _ value: String?) {
        guard var value else { sqlite3_bind_null(handle, index); return }
        value.withUTF8 { buffer in
            _ = buffer.withMemoryRebound(to: CChar.self) { chars in
                sqlite3_bind_text(handle, index, chars.baseAddress, Int32(chars.count), transient)
            }
        }
    }

    /// Steps once: true when a row is available.
    @inline(__always) func step() throws -> Bool {
        let code = sqlite3_step(handle)
        if code == SQLITE_ROW { return true }
        if code == SQLITE_DONE { return false }
        throw RawError(code: code, message: String(cString: sqlite3_errmsg(db.handle)))
    }

    func run() throws {
        while try step() {}
        sqlite3_reset(handle)
    }

    @inline(__always) func reset() { sqlite3_reset(handle) }

    @inline(__always) func int(_ column: Int32) -> Int { Int(sqlite3_column_int64(handle, column)) }
    @inline(__always) func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    @inline(__always) func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }
    @inline(__always) func text(_ column: Int32) -> String {
        guard let bytes = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }
    @inline(__always) func optionalText(_ column: Int32) -> String? {
        sqlite3_column_type(handle, column) == SQLITE_NULL ? nil : text(column)
    }
}
