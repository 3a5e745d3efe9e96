@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel

/// The statements `stack.trace` shows for two reads of an update context with nothing queued,
/// pinned or handed over: a read by ID of an object it does not hold, then a fetch. What each
/// store's tests expect of them: one statement for the first, a transaction for the second.
func statementsOfReadsWithNothingToKeepInStep(_ store: TestStore) throws -> (lookup: [String], fetch: [String]) {
    let writer = try ContextStack.Context(stack: store.stack)
    let id = try writer.beginUpdateAndWait { update -> ObjectID in
        let monk = try update.create(Person.self)
        monk.name = "Monk"
        try update.commit()
        return monk.objectID
    }
    try store.stack.flushAndWait()
    let statements = Locked<[String]>([])
    store.stack.trace { sql in statements.withLock { $0.append(sql) } }
    defer { store.stack.trace(nil) }
    let reader = try ContextStack.Context(stack: store.stack)
    guard try reader.beginUpdateAndWait({ update in try update.fetch(Person.self, id: id)?.name }) == "Monk" else {
        return ([], [])
    }
    let lookup = statements.withLock { $0 }
    statements.withLock { $0.removeAll() }
    _ = try reader.beginUpdateAndWait { update in try update.fetchAll(Person.self, %"name" == "Monk") }
    return (lookup, statements.withLock { $0 })
}
