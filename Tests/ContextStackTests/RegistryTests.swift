@testable import ContextStack
@testable import _ContextStackModel
import Testing

/// The identity map's hash table (`Registry`) against a `Dictionary` doing the same: random
/// registrations, removals and lookups over a few entities and a narrow range of keys, so that
/// runs of occupied slots form, grow, wrap around the end of the table and are cut by removals.
@Suite struct RegistryTests {
    @Test(arguments: [UInt64(1), 2, 3]) @MainActor
    func theRegistryAgreesWithADictionary(seed: UInt64) throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<40 { try update.create(Person.self).name = "p\(index)" }
            try update.commit()
        }
        let pool: [ManagedObject] = try world.fetchAll(Person.self)
        let entities = [Person.self, Pet.self, Sample.self].map { store.stack.graph.entity(for: $0).rootDescription }
        var random = SeededGenerator(seed: seed)
        var registry = Registry()
        var reference: [ObjectID: ManagedObject] = [:]
        for step in 0..<60_000 {
            // Grow up to a few thousand IDs, then shrink, twice over.
            let keys = Int64(step % 30_000 < 15_000 ? 4_000 : 400)
            let id = ObjectID(rootEntity: entities.randomElement(using: &random)!, primaryKey: Int64.random(in: 0..<keys, using: &random))
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                let object = pool.randomElement(using: &random)!
                registry[id] = ContextCore.WeakObject(object: object)
                reference[id] = object
            case 4..<7:
                registry[id] = nil
                reference[id] = nil
            default:
                #expect(registry.object(id) === reference[id], "step \(step): \(id)")
                #expect(registry[id]?.object === reference[id], "step \(step): \(id)")
            }
            if step % 5_000 == 4_999 {
                #expect(registry.count == reference.count)
                #expect(registry.capacity >= registry.count)
                var seen = 0
                for (key, entry) in registry {
                    #expect(entry.object === reference[key])
                    seen += 1
                }
                #expect(seen == reference.count)
                for key in reference.keys { #expect(registry.object(key) === reference[key]) }
            }
        }
        // A sweep drops the picked objects' slots and keeps every other one findable.
        let dropped = pool[0]
        registry.removeAll { $0.object === dropped }
        reference = reference.filter { $0.value !== dropped }
        #expect(registry.count == reference.count)
        for key in reference.keys { #expect(registry.object(key) === reference[key]) }
        registry.reserveCapacity(registry.count + 10_000)
        for key in reference.keys { #expect(registry.object(key) === reference[key]) }
    }

    /// The registry holds its objects weakly: once released, an object is not found.
    @Test @MainActor func theRegistryHoldsObjectsWeakly() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let id = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            try update.commit()
            return person.objectID
        }
        var registry = Registry()
        do {
            let person = try #require(try MainContext(stack: store.stack).fetch(Person.self, id: id))
            registry[id] = ContextCore.WeakObject(object: person)
            #expect(registry.object(id) === person)
        }
        #expect(registry.object(id) == nil)
        #expect(registry.count == 1, "the slot stays until a sweep")
        registry.removeAll { $0.object == nil }
        #expect(registry.count == 0)
    }
}
