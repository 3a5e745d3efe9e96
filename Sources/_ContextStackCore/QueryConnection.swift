/// A store's connection as the layers above it read through it: a SELECT with bound values,
/// and its rows read by column position.
///
/// The row reader, counts and aggregates use nothing else of a connection, so a second store
/// is a second conformance, not a fork of the readers. SQL reaches a connection with `?`
/// placeholders, bound in order; a client whose server numbers its parameters rewrites them.
package protocol QueryConnection {
    /// Runs `sql` with `arguments` bound to its placeholders in order and hands each row to
    /// `body`. The row is valid only during that call.
    func select(_ sql: String, _ arguments: [Value], _ body: (any QueryRow) throws -> Void) throws
    /// `select`, telling `expecting` how many rows will follow before the first of them, when
    /// the client knows (PostgreSQL's results arrive whole; SQLite's are stepped and never
    /// call it), so that a caller can size what it builds once.
    func select(_ sql: String, _ arguments: [Value], expecting: (Int) -> Void, _ body: (any QueryRow) throws -> Void) throws
}

/// A select abandoned because its connection's snapshot check found that the snapshot the
/// statement took was not the one its read asked for (a write landed between the read's lock
/// and the statement). The store's read that set the check catches it and reads again.
package struct SnapshotMoved: Error {
    package init() {}
}

extension QueryConnection {
    package func select(_ sql: String, _ arguments: [Value], expecting: (Int) -> Void, _ body: (any QueryRow) throws -> Void) throws {
        try select(sql, arguments, body)
    }
}

extension QueryConnection {
    /// The first column of the first row, or `.null` when there is no row.
    package func scalar(_ sql: String, _ arguments: [Value] = []) throws -> Value {
        var result = Value.null
        var first = true
        try select(sql, arguments) { row in
            if first { result = row.value(0) }
            first = false
        }
        return result
    }
}

/// The current row of a `QueryConnection.select`: one object the connection moves from row to
/// row for the whole select, so that a reader that keeps it (`_SnapshotRow.stored`) sets it
/// once, not once a row.
@usableFromInline
package protocol QueryRow: AnyObject {
    /// Column `column` (0-based) as a value.
    func value(_ column: Int) -> Value
    /// Column `column` when it holds an integer, `nil` otherwise (null or another type): what
    /// `value` would wrap in `.integer`, without making the `Value`.
    func integer(_ column: Int) -> Int64?
    /// Column `column` when it holds a double (`.double` of `value`), `nil` otherwise.
    func double(_ column: Int) -> Double?
    /// Column `column` when it holds text (`.text` of `value`), `nil` otherwise.
    func text(_ column: Int) -> String?
    /// Column `column` as an integer; what a non-integer becomes is the client's conversion.
    func int64(_ column: Int) -> Int64
    func isNull(_ column: Int) -> Bool
    /// The number of columns.
    var columnCount: Int { get }
    /// Reads column `positions[i]` into `values[slots[i]]` for every `i`: a whole object's
    /// values in one call, so decoding a row costs one dynamic call rather than one a column.
    func read(_ positions: [Int], into values: inout ContiguousArray<Value>, slots: [Int])
}

extension QueryRow {
    package func integer(_ column: Int) -> Int64? {
        if case .integer(let integer) = value(column) { return integer }
        return nil
    }

    package func double(_ column: Int) -> Double? {
        if case .double(let double) = value(column) { return double }
        return nil
    }

    package func text(_ column: Int) -> String? {
        if case .text(let text) = value(column) { return text }
        return nil
    }
}

extension QueryConnection {
    /// Every row of `sql`, each as its values.
    package func allRows(_ sql: String, _ arguments: [Value] = []) throws -> [[Value]] {
        var rows: [[Value]] = []
        try select(sql, arguments) { row in
            rows.append((0..<row.columnCount).map(row.value))
        }
        return rows
    }
}

/// A connection a store's writer also changes rows through: batch operations run on it.
package protocol StoreConnection: QueryConnection {
    /// Runs a statement that returns no rows, with `arguments` bound to its placeholders.
    func execute(_ sql: String, _ arguments: [Value]) throws
}
