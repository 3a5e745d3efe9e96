@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Counts the statements a stack runs that read or write rows, through `Stack.trace`
/// (transaction bookkeeping — BEGIN, COMMIT, a read's opening probe — is left out).
final class StatementCounter: Sendable {
    private let statements = Locked<[String]>([])
    init(_ stack: Stack) {
        stack.trace { [statements] sql in
            let bookkeeping = ["BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SELECT 1 FROM sqlite_master"]
            guard !bookkeeping.contains(where: { sql.hasPrefix($0) }) else { return }
            statements.withLock { $0.append(sql) }
        }
    }
    var all: [String] { statements.withLock { $0 } }
    /// The statements `body` runs.
    func during(_ body: () throws -> Void) rethrows -> [String] {
        let before = all.count
        try body()
        return Array(all.dropFirst(before))
    }

    /// What `body` returns, and the statements it runs.
    func value<T>(_ body: () throws -> T) rethrows -> (T, [String]) {
        let before = all.count
        let value = try body()
        return (value, Array(all.dropFirst(before)))
    }
}

/// `Fixtures.people` in an in-memory store, shown by a main context, and the select list of a
/// whole person's row: what the docs' SQL examples run against.
@MainActor func peopleForDocumentedSQL() async throws -> (store: TestStore, world: MainContext, wholeRow: String) {
    let store = try TestStore(.memory)
    let world = try MainContext(stack: store.stack)
    try world.beginUpdateAndWait(Fixtures.people)
    try await store.stack.flush()
    return (store, world, try #require(store.stack.graph.entity(for: Person.self).table?.wholeRowSelectList))
}

/// Checks that `body` runs exactly the statements `expected` (transaction bookkeeping left
/// out, see `StatementCounter`), in order, and returns what `body` returns: the SQL a fetch,
/// count or query produces is part of what the docs promise.
@discardableResult
func expectSQL<T>(_ stack: Stack, _ expected: [String], sourceLocation: SourceLocation = #_sourceLocation,
                  _ body: () throws -> T) rethrows -> T {
    let counter = StatementCounter(stack)
    let (value, statements) = try counter.value(body)
    #expect(statements == expected, sourceLocation: sourceLocation)
    stack.trace(nil)
    return value
}
