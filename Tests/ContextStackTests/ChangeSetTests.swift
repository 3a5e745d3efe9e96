@testable import ContextStack
@testable import _ContextStackModel
import Testing

/// What an update hands down when it commits (`ContextCore.makeChangeSet`).
@Suite struct ChangeSetTests {
    /// Rows go to the store in key order, table by table, whatever order the update made,
    /// changed or deleted them in: a B-tree takes rows in key order at its right edge, where
    /// rows in a dictionary's order land all over the table (Docs/Performance.md, "What was
    /// changed": an import of 100,000 objects made twelve times raw's system calls).
    @Test @MainActor func aCommitListsItsRowsInKeyOrderTableByTable() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let ids = try world.committedPeople(200).map(\.objectID)
        try world.beginUpdateAndWait { update in
            for _ in 0..<100 {
                _ = try update.create(Pet.self)
                _ = try update.create(Person.self)
            }
            for id in ids.prefix(100).shuffled() { try #require(try update.fetch(Person.self, id: id)).age += 1 }
            for id in ids.suffix(50).shuffled() { try update.delete(try #require(try update.fetch(Person.self, id: id))) }
            let changes = try update.core.makeChangeSet()
            let inserted = changes.inserts.map(\.id)
            #expect(inserted.count == 200 && inserted == inserted.sorted())
            #expect(inserted.first?.entityName == "Person" && inserted.last?.entityName == "Pet", "one table, then the other")
            let updated = changes.updates.map(\.id)
            #expect(updated.count == 100 && updated == updated.sorted())
            let deleted = changes.deletes.map(\.id)
            #expect(deleted.count == 50 && deleted == deleted.sorted())
        }
    }
}
