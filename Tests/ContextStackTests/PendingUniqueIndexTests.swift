@testable import ContextStack
@testable import _ContextStackModel
import _ContextStackCore
import Testing

/// `fetchOrCreate`'s index of an update's pending objects by their unique values
/// (`PendingUniqueIndex`) files objects under a digest of their values and judges every object
/// it finds by the values themselves: two keys with one digest must never return each other's
/// object. `Hasher` is seeded anew in every process, so this forces the collisions: an index
/// that keeps no bit of a digest files every key under one.
@Suite struct PendingUniqueIndexTests {
    @Test @MainActor func aLookUpJudgesWhatItFindsByTheObjectsValuesWhenEveryKeyCollides() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let people = try (0..<5).map { index in
                let person = try update.create(Person.self)
                person.email = "p\(index)@example.org"
                return person
            }
            let core = update.core
            let constraint = try #require(core.graph.entity(for: Person.self).uniqueConstraints.first)
            var index = PendingUniqueIndex(core.changed, digestBits: 0)
            func found(_ email: String, where matches: (ManagedObject) -> Bool = { _ in true }) -> ManagedObject? {
                index.first(constraint, [.text(email)], pending: core.changed, where: matches)
            }

            for (number, person) in people.enumerated() {
                #expect(found("p\(number)@example.org") === person)
            }
            #expect(found("nobody@example.org") == nil)
            // `matches` is asked of the object that holds the values, and of no other.
            #expect(found("p1@example.org") { $0 !== people[1] } == nil)

            // A changed value is found under the new value, no longer under the old.
            index.touch(people[2])
            people[2].email = "moved@example.org"
            #expect(found("moved@example.org") === people[2])
            #expect(found("p2@example.org") == nil)

            // A deleted object is found no more; the others still are.
            index.touch(people[3])
            try update.delete(people[3])
            #expect(found("p3@example.org") == nil)
            #expect(found("p4@example.org") === people[4])
            update.rollback()
        }
    }
}
