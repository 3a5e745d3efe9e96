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
    /// Reads column `layout.positions[i]` into `values[layout.slots[i]]` for every `i`: a whole
    /// object's values in one call, so decoding a row costs one dynamic call rather than one a
    /// column.
    func read(_ layout: ColumnSlots, into values: inout ContiguousArray<Value>)
}

/// Where a whole-row SELECT's columns go among an object's slots: column `positions[i]` into
/// slot `slots[i]`. Plain buffers rather than arrays, so that handing them to every row's
/// `QueryRow.read` retains and releases nothing (with arrays each row retained and released
/// both). Whoever makes one owns its memory: `allocate`, then `deallocate` once, when no read
/// can use it any more.
@usableFromInline
package struct ColumnSlots: @unchecked Sendable {
    // @unchecked: written only by `allocate`, before the owner shares it; read-only after.
    package let positions: UnsafeBufferPointer<Int>
    package let slots: UnsafeBufferPointer<Int>

    /// No columns.
    package static let none = ColumnSlots(positions: UnsafeBufferPointer(start: nil, count: 0),
                                          slots: UnsafeBufferPointer(start: nil, count: 0))

    private init(positions: UnsafeBufferPointer<Int>, slots: UnsafeBufferPointer<Int>) {
        self.positions = positions
        self.slots = slots
    }

    /// A copy of `positions` and `slots` (of the same length) in memory of its own.
    package static func allocate(positions: [Int], slots: [Int]) -> ColumnSlots {
        precondition(positions.count == slots.count, "unreachable: a layout pairs each position with a slot")
        let memory = UnsafeMutableBufferPointer<Int>.allocate(capacity: positions.count * 2)
        _ = memory.initialize(from: positions + slots)
        return ColumnSlots(positions: UnsafeBufferPointer(rebasing: memory[..<positions.count]),
                           slots: UnsafeBufferPointer(rebasing: memory[positions.count...]))
    }

    /// Frees what `allocate` took; the layout must not be read again.
    package func deallocate() {
        guard let base = positions.baseAddress else { return }
        UnsafeMutablePointer(mutating: base).deinitialize(count: positions.count * 2).deallocate()
    }
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
