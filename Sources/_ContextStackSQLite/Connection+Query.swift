import _ContextStackCore

// SQLite's connection is the first `QueryConnection`: a cached prepared statement, stepped.

extension Connection: QueryConnection {
    package func select(_ sql: String, _ arguments: [Value], _ body: (any QueryRow) throws -> Void) throws {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        let row: any QueryRow = statement  // made once: making it per row retains per row
        var more = try statement.step()
        // SQLite took the statement's snapshot in that first step; no row has been handed on.
        if let check = snapshotCheck { try confirmSnapshot(check) }
        while more {
            try body(row)
            more = try statement.step()
        }
    }

    private func confirmSnapshot(_ check: () -> Bool) throws {
        guard check() else {
            snapshotMoved = true
            throw SnapshotMoved()
        }
        // In a transaction its first statement fixed the snapshot for the rest of it.
        if isInTransaction { snapshotCheck = nil }
    }
}

extension Statement: QueryRow {
    package func value(_ column: Int) -> Value { self.column(column) }

    package func read(_ layout: ColumnSlots, into values: inout ContiguousArray<Value>) {
        for index in layout.positions.indices {
            values[layout.slots[index]] = column(layout.positions[index])
        }
    }
}
