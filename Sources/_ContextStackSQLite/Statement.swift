import _ContextStackCore
import CSQLite
import Foundation

/// `SQLITE_TRANSIENT`: SQLite copies bound text and blobs before the call returns.
nonisolated(unsafe) let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A valid pointer for binding empty text (`""` has no buffer of its own in `withUTF8`).
nonisolated(unsafe) private let emptyCString: UnsafePointer<CChar> = {
    let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: 1)
    pointer.initialize(to: 0)
    return UnsafePointer(pointer)
}()

/// A prepared statement, owned by one `Connection` and used only where that connection is.
///
/// Statements are cached by their connection: `connection.cachedStatement(sql)` prepares once,
/// and every later use only resets and rebinds.
package final class Statement {
    package let handle: OpaquePointer
    package let sql: String
    unowned let connection: Connection

    package init(connection: Connection, sql: String) throws(SQLiteError) {
        var handle: OpaquePointer?
        let code = sqlite3_prepare_v3(connection.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &handle, nil)
        guard code == SQLITE_OK, let handle else {
            throw connection.error(code, sql: sql)
        }
        self.handle = handle
        self.sql = sql
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    package var columnCount: Int { Int(sqlite3_column_count(handle)) }

    package func columnName(_ index: Int) -> String { String(cString: sqlite3_column_name(handle, Int32(index))) }

    /// Binds `value` to the parameter at `index` (1-based, as in SQLite).
    package func bind(_ value: Value, at index: Int) throws(SQLiteError) {
        let position = Int32(index)
        let code: Int32
        switch value {
        case .null: code = sqlite3_bind_null(handle, position)
        case .integer(let int): code = sqlite3_bind_int64(handle, position, int)
        case .double(let double): code = sqlite3_bind_double(handle, position, double)
        case .text(let text):
            var text = text
            code = text.withUTF8 { buffer in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    // An empty string still binds as text: SQLite wants a non-null pointer for that.
                    sqlite3_bind_text(handle, position, chars.baseAddress ?? emptyCString, Int32(chars.count), transient)
                }
            }
        case .blob(let data):
            code = data.withUnsafeBytes { buffer in
                // A zero-length blob must still be a blob, not NULL.
                sqlite3_bind_blob(handle, position, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count), transient)
            }
        }
        guard code == SQLITE_OK else { throw connection.error(code, sql: sql) }
    }

    /// Binds `values` to parameters 1, 2, …
    package func bind(_ values: some Sequence<Value>) throws(SQLiteError) {
        var index = 1
        for value in values {
            try bind(value, at: index)
            index += 1
        }
    }

    /// Steps once: `true` when a row is available, `false` when the statement is done.
    package func step() throws(SQLiteError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code: throw connection.error(code, sql: sql)
        }
    }

    /// Runs a statement that returns no rows, then resets it for the next use.
    package func execute() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    /// Resets the statement and clears its bindings, ready for reuse.
    package func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Reads column `index` (0-based) of the current row.
    package func column(_ index: Int) -> Value {
        let value = sqlite3_column_value(handle, Int32(index))
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: return .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: return .double(sqlite3_value_double(value))
        case SQLITE_TEXT: return .text(Self.string(of: value))
        case SQLITE_BLOB:
            guard let bytes = sqlite3_value_blob(value) else { return .blob(Data()) }
            return .blob(Data(bytes: bytes, count: Int(sqlite3_value_bytes(value))))
        default: return .null
        }
    }

    // The reads of a column ask for its value once and read its type and contents from it:
    // `sqlite3_column_type` then `sqlite3_column_int64` each find the column and enter and
    // leave the connection, and that second lookup was a sixth of reading snapshots.

    /// Column `index` when it holds an integer; `nil` when it holds anything else.
    package func integer(_ index: Int) -> Int64? {
        let value = sqlite3_column_value(handle, Int32(index))
        return sqlite3_value_type(value) == SQLITE_INTEGER ? sqlite3_value_int64(value) : nil
    }

    /// Column `index` when it holds a double; `nil` when it holds anything else.
    package func double(_ index: Int) -> Double? {
        let value = sqlite3_column_value(handle, Int32(index))
        return sqlite3_value_type(value) == SQLITE_FLOAT ? sqlite3_value_double(value) : nil
    }

    /// Column `index` when it holds text; `nil` when it holds anything else.
    package func text(_ index: Int) -> String? {
        let value = sqlite3_column_value(handle, Int32(index))
        return sqlite3_value_type(value) == SQLITE_TEXT ? Self.string(of: value) : nil
    }

    /// The text of a value that holds text.
    private static func string(of value: OpaquePointer?) -> String {
        guard let bytes = sqlite3_value_text(value) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: bytes, count: Int(sqlite3_value_bytes(value))), as: UTF8.self)
    }

    /// Reads column `index` as an integer (SQLite converts as it does for `sqlite3_column_int64`).
    package func int64(_ index: Int) -> Int64 { sqlite3_column_int64(handle, Int32(index)) }

    package func isNull(_ index: Int) -> Bool { sqlite3_column_type(handle, Int32(index)) == SQLITE_NULL }
}
