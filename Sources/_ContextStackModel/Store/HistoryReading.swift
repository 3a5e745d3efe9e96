import Foundation
import _ContextStackCore

/// The two SELECTs a store reads its history with; the rest of reading is the same on every
/// store (`HistoryReading`).
package struct HistoryQueries: Sendable {
    /// Transactions after a token, oldest first. Columns: position, sequence, date (seconds
    /// since 1970), author, the writing stack's instance.
    package let headers: String
    /// The same with a sixth column: the changes (`HistoryEncoding`).
    package let transactions: String
    /// The values both SELECTs bind for "after `token`" (`nil`: from the beginning).
    package let arguments: @Sendable (HistoryToken?) -> [Value]

    package init(headers: String, transactions: String, arguments: @escaping @Sendable (HistoryToken?) -> [Value]) {
        self.headers = headers
        self.transactions = transactions
        self.arguments = arguments
    }
}

/// Reading history: what `history(after:)` returns, and what the history watcher delivers.
package enum HistoryReading {
    /// The transactions after `token`, oldest first, each with the stack instance that wrote it.
    ///
    /// A transaction whose changes are not in ContextStack's format throws `StoreError`
    /// `.corrupt`; given `unreadable`, it is left out and handed to `unreadable` instead.
    package static func transactions(after token: HistoryToken?, connection: any QueryConnection, graph: ModelGraph,
                                     queries: HistoryQueries,
                                     unreadable: ((HistoryToken, StoreError) -> Void)? = nil) throws -> [(transaction: HistoryTransaction, instance: String)] {
        var transactions: [(transaction: HistoryTransaction, instance: String)] = []
        try connection.select(queries.transactions, queries.arguments(token)) { row in
            let header = self.header(row)
            let changes: [HistoryChange]
            do {
                changes = try row.value(5).dataValue.map { try HistoryEncoding.decode($0, graph: graph) } ?? []
            } catch let error as StoreError where unreadable != nil {
                unreadable?(header.token, error)
                return
            }
            transactions.append((HistoryTransaction(token: header.token, date: header.date, author: header.author, changes: changes),
                                 header.instance))
        }
        return transactions
    }

    /// A transaction's token, date, author and instance, from the first five columns of `row`.
    private static func header(_ row: any QueryRow) -> (token: HistoryToken, date: Date, author: String?, instance: String) {
        (HistoryToken(position: row.int64(0), sequence: row.int64(1)), Date(timeIntervalSince1970: row.value(2).doubleValue ?? 0),
         row.value(3).stringValue, row.value(4).stringValue ?? "")
    }

    /// The transactions after `token` without their changes: token, date, author, instance.
    private static func headers(after token: HistoryToken?, connection: any QueryConnection,
                                queries: HistoryQueries) throws -> [(token: HistoryToken, date: Date, author: String?, instance: String)] {
        var headers: [(token: HistoryToken, date: Date, author: String?, instance: String)] = []
        try connection.select(queries.headers, queries.arguments(token)) { row in headers.append(header(row)) }
        return headers
    }

    /// Whether another stack than `instance` wrote one of the transactions after `token`, and
    /// the newest token among them. A follower wakes mostly for its own stack's commits: this
    /// says so from the transactions alone, without the state lock that every commit of the
    /// process waits for, so it can move past them without the full read.
    package static func othersWrote(after token: HistoryToken?, connection: any QueryConnection,
                                    queries: HistoryQueries, instance: String) throws -> (othersWrote: Bool, last: HistoryToken?) {
        let headers = try headers(after: token, connection: connection, queries: queries)
        return (headers.contains { $0.instance != instance }, headers.last?.token ?? token)
    }

    /// Reads the transactions after `token` with `reader` and hands those another stack wrote
    /// (not `instance`) to `deliver`, as `remote` makes them; returns the token to continue
    /// from, this stack's own transactions included.
    ///
    /// A transaction whose changes cannot be read (something else than ContextStack wrote the
    /// row, or a later version's format) is passed over, with a `StoreError` `.corrupt` that
    /// names it to `unreadable`: stopping there would stop delivery for good, since the row
    /// reads the same every time.
    package static func deliverRemote(after token: HistoryToken?, reader: inout RowReader, queries: HistoryQueries, instance: String,
                                      unreadable: (StoreError) -> Void,
                                      _ deliver: ([RemoteTransaction]) -> Void) throws -> HistoryToken? {
        var last = token
        var skipped: [StoreError] = []
        let all = try transactions(after: token, connection: reader.session.connection, graph: reader.session.graph, queries: queries) { token, error in
            last = token
            skipped.append(StoreError(.corrupt, "The history transaction \(token) cannot be read, so what it changed was not delivered to this stack: objects its contexts hold may be stale until they are fetched again. \(error.message)", underlying: error.underlying))
        }
        let others = all.filter { $0.instance != instance }.map(\.transaction)
        if !others.isEmpty { deliver(try remote(others, reader: &reader)) }
        skipped.forEach(unreadable)
        if let newest = all.last?.transaction.token, last.map({ $0 < newest }) ?? true { last = newest }
        return last
    }

    /// What brings a main context's objects to what `transactions` did: the values stored now,
    /// read by `reader` (with this process's queued commits on top, which will be written after
    /// them). An object inserted or updated and deleted since is a deletion; one inserted and
    /// deleted since is nothing.
    package static func remote(_ transactions: [HistoryTransaction], reader: inout RowReader) throws -> [RemoteTransaction] {
        let graph = reader.session.graph
        var wanted: [ObjectID] = []
        for transaction in transactions {
            for change in transaction.changes where change.kind != .delete { wanted.append(change.objectID) }
        }
        let rows = try reader.rows(for: wanted)
        return transactions.map { transaction in
            var changes = ChangeSet()
            changes.info.author = transaction.author
            changes.info.token = transaction.token
            for change in transaction.changes {
                let id = change.objectID
                guard let entity = graph.entity(named: change.entityName) else { continue }
                switch change.kind {
                case .insert:
                    if let row = rows[id] { changes.inserts.append((id, row)) }
                case .update:
                    guard let row = rows[id] else {
                        changes.deletes.append((id, entity))
                        continue
                    }
                    let slots = row.entity.storedSlots.filter { change.changedKeys.contains(row.entity.properties[$0].name) }
                    changes.updates.append(.init(id: id, entity: row.entity, slots: slots, values: slots.map { row.values[$0] }))
                case .delete:
                    changes.deletes.append((id, entity))
                }
            }
            return RemoteTransaction(transaction: transaction, changes: changes)
        }
    }
}
