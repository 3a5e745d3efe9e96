@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel

/// The statements `stack.trace` shows for three reads of an update context with nothing queued,
/// pinned or handed over: a read by ID of an object it does not hold, a fetch whose query is
/// all it runs, and a fetch through a to-one key path (which may read the rows a pending
/// change reaches first). What each store's tests expect of them: one statement for the first
/// two, a transaction for the third.
func statementsOfReadsWithNothingToKeepInStep(_ store: TestStore) throws -> (lookup: [String], fetch: [String], acrossKeyPath: [String]) {
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
        return ([], [], [])
    }
    let lookup = statements.withLock { $0 }
    statements.withLock { $0.removeAll() }
    _ = try reader.beginUpdateAndWait { update in try update.fetchAll(Person.self, %"name" == "Monk") }
    let fetch = statements.withLock { $0 }
    statements.withLock { $0.removeAll() }
    _ = try reader.beginUpdateAndWait { update in try update.fetchAll(Person.self, %"friend.name" == "Monk") }
    return (lookup, fetch, statements.withLock { $0 })
}

/// The statements `stack.trace` shows for a main context's first public read, a `fetchAll`:
/// what each store's tests expect of it is its `SELECT` alone, with no statement under the
/// store's lock to pin a snapshot (the writer's epoch is checked instead).
@MainActor
func statementsOfAMainContextRead(_ store: TestStore) throws -> [String] {
    let statements = Locked<[String]>([])
    store.stack.trace { sql in statements.withLock { $0.append(sql) } }
    defer { store.stack.trace(nil) }
    let world = try MainContext(stack: store.stack)
    _ = try world.fetchAll(Person.self)
    return statements.withLock { $0 }
}
