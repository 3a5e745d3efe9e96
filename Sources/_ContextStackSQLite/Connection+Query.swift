import _ContextStackCore

// SQLite's connection is the first `QueryConnection`: a cached prepared statement, stepped.

extension Connection: QueryConnection {
    package func select(_ sql: String, _ arguments: [Value], _ body: (any QueryRow) throws -> Void) throws {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        let row: any QueryRow = statement  // made once: making it per row retains per row
        while try statement.step() { try body(row) }
    }
}

extension Statement: QueryRow {
    package func value(_ column: Int) -> Value { self.column(column) }

    package func read(_ positions: [Int], into values: inout ContiguousArray<Value>, slots: [Int]) {
        for index in positions.indices {
            values[slots[index]] = column(positions[index])
        }
    }
}
