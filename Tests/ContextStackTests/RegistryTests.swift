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
        registry.reserveCapacity(registry.count + 10_000)
        #expect(registry.count == reference.count)
        for key in reference.keys { #expect(registry.object(key) === reference[key]) }
    }

    /// The registry holds its objects weakly: once released, an object is not found, and the
    /// table drops its slot when it next grows, rather than growing for it.
    @Test @MainActor func theRegistryHoldsObjectsWeaklyAndDropsTheGoneWhenItGrows() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let ids = try world.committedPeople(1_000).map(\.objectID)
        var registry = Registry()
        var kept: [ManagedObject] = []
        do {
            let reader = try MainContext(stack: store.stack)
            var alive: [ManagedObject] = []
            for (index, id) in ids.enumerated() {
                let person = try #require(try reader.fetch(Person.self, id: id))
                registry.register(person, as: id)
                alive.append(person)
                if index < 10 { kept.append(person) }
            }
            #expect(registry.object(ids[999]) != nil)
        }
        #expect(registry.object(ids[999]) == nil, "released")
        #expect(registry.object(ids[0]) === kept[0])
        #expect(registry.count == 1_000, "slots stay until the table next grows")
        // While a fetch registers (`sweepsWhenGrowing` off), growing keeps every slot.
        var fetching = registry
        fetching.sweepsWhenGrowing = false
        let room = fetching.capacity - fetching.count + 1
        let placeholders = try world.beginUpdateAndWait { update in
            let made = try (0..<room).map { _ in try update.create(Sample.self) as ManagedObject }
            try update.commit()
            return made
        }
        for object in placeholders { fetching.register(object, as: object.objectID) }
        #expect(fetching.count == 1_000 + room, "the 990 gone stay while sweeps are off")
        #expect(fetching.object(ids[0]) === kept[0] && fetching.object(ids[999]) == nil)
        for object in placeholders { #expect(fetching.object(object.objectID) === object) }

        let capacity = registry.capacity
        let (other, sameID) = try world.beginUpdateAndWait { update in
            let more = try (0..<capacity).map { _ in try update.create(Pet.self) }
            try update.commit()
            return (more as [ManagedObject], more[0].objectID)
        }
        for object in other { registry.register(object, as: object.objectID) }
        #expect(registry.count == 10 + other.count, "growing dropped the 990 gone")
        #expect(registry.capacity < 4 * (10 + other.count))
        #expect(registry.object(sameID) === other[0])
        for (index, object) in kept.enumerated() { #expect(registry.object(ids[index]) === object) }
    }

    /// Registering objects the caller holds (an update's created objects, `alive`) grows the
    /// table once per doubling: sweeping it first could not free enough room. Without the
    /// hint a full table is swept, then doubled.
    @Test @MainActor func objectsKnownAliveGrowTheTableOnceADoubling() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let made = try world.committedPeople(1_000)
        var hinted = Registry()
        var unhinted = Registry()
        for (index, object) in made.enumerated() {
            hinted.register(object, as: object.objectID, alive: index)
            unhinted.register(object, as: object.objectID)
        }
        #expect(hinted.count == 1_000 && unhinted.count == 1_000)
        // 8, 16, …, 2048 slots: nine doublings from empty.
        #expect(hinted.rebuilds == 9 && hinted.sweeps == 0)
        #expect(unhinted.rebuilds == 9 && unhinted.sweeps == 8)
        for object in made { #expect(hinted.object(object.objectID) === object) }
    }

    /// A context that registers one object at a time and lets each go keeps its first table:
    /// a full table is swept in place, where it was rebuilt with new arrays every few objects.
    @Test @MainActor func objectsLetGoOneAtATimeAreSweptInPlace() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let made = try world.committedPeople(200).map(\.objectID)
        world.reset()
        var kept: [Person] = []
        for (index, id) in made.enumerated() {
            let person = try #require(try world.fetch(Person.self, id: id))
            if index % 50 == 0 { kept.append(person) }
        }
        var registry = world.core.registry
        #expect(registry.rebuilds <= 2, "\(registry.rebuilds) new tables for at most five live objects")
        #expect(registry.sweeps > 20)
        #expect(registry.count < 16)
        for person in kept { #expect(registry.object(person.objectID) === person) }
    }

    /// A sweep frees exactly the slots of gone objects and leaves every live one findable, in
    /// a table three quarters full, whose runs cross blocks and wrap past its end.
    @Test(arguments: [1, 2, 3] as [UInt64]) @MainActor
    func aSweepDropsExactlyTheGone(seed: UInt64) throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        var random = SeededGenerator(seed: seed)
        for round in 0..<20 {
            var objects: [ManagedObject?] = try world.committedPeople(96)
            let ids = objects.map { $0!.objectID }
            var registry = Registry()
            registry.reserveCapacity(96)
            for object in objects { registry.register(object!, as: object!.objectID, alive: 96) }
            #expect(registry.count == 96 && registry.capacity == 96, "round \(round): the table is full")
            for index in objects.indices where Bool.random(using: &random) { objects[index] = nil }
            let alive = objects.compactMap { $0 }
            registry.sweep()
            #expect(registry.count == alive.count, "round \(round)")
            for (index, id) in ids.enumerated() {
                if let object = objects[index] {
                    #expect(registry.object(id) === object, "round \(round): \(id) lost")
                } else {
                    #expect(registry[id] == nil, "round \(round): \(id) kept")
                }
            }
            #expect(Set(registry.map(\.key)) == Set(alive.map(\.objectID)))
        }
    }

    /// A sweep keeps every live ID findable whatever the table's runs look like: many tables
    /// of random size and density, their IDs dense enough to make long runs that cross blocks
    /// and wrap past the end, sharing a few objects of which a random half is let go. (A sweep
    /// that laid the runs again starting from a slot it had freed itself lost an ID now and
    /// then: one put back past another of its run that moved back after it.)
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64]) @MainActor
    func sweepsKeepEveryLiveIDFindable(seed: UInt64) throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        _ = try world.committedPeople(48)
        let entities = [Person.self, Pet.self].map { store.stack.graph.entity(for: $0).rootDescription }
        var random = SeededGenerator(seed: seed)
        for round in 0..<400 {
            world.reset()
            var pool: [ManagedObject?] = try world.fetchAll(Person.self)
            var registry = Registry()
            var owners: [ObjectID: Int] = [:]
            let count = Int.random(in: 8...700, using: &random)
            let keys = Int64(count) * Int64.random(in: 1...2, using: &random)
            while owners.count < count {
                let id = ObjectID(rootEntity: entities.randomElement(using: &random)!, primaryKey: Int64.random(in: 0..<keys, using: &random))
                guard owners[id] == nil else { continue }
                let owner = Int.random(in: 0..<pool.count, using: &random)
                // Every object known alive: growing does not sweep before the sweep below.
                registry.register(pool[owner]!, as: id, alive: Int.max)
                owners[id] = owner
            }
            for index in pool.indices where Bool.random(using: &random) { pool[index] = nil }
            registry.sweep()
            let alive = owners.filter { pool[$0.value] != nil }
            #expect(registry.count == alive.count, "round \(round)")
            for (id, owner) in owners {
                if let object = pool[owner] {
                    #expect(registry.object(id) === object, "round \(round): \(id) lost")
                } else {
                    #expect(registry[id] == nil, "round \(round): \(id) kept")
                }
            }
        }
    }

    /// The look for gone objects before a fetch (`dropGoneIfDue`) is skipped when the objects
    /// the caller holds leave too few to free: an import by `fetchOrCreate` reads once per
    /// object with all of its objects held, and rebuilt the table for nothing each time a
    /// quarter of it had been registered.
    @Test @MainActor func aSweepThatCannotFreeEnoughIsSkipped() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let made = try world.committedPeople(1_200)
        var registry = Registry()
        for (index, object) in made.enumerated() { registry.register(object, as: object.objectID, alive: index) }
        let sweeps = registry.sweeps
        registry.dropGoneIfDue(alive: made.count)
        #expect(registry.sweeps == sweeps, "every registered object is held: nothing to drop")
        registry.dropGoneIfDue()
        #expect(registry.sweeps == sweeps + 1, "a quarter of the table was registered since the last sweep")
        #expect(registry.count == made.count)
    }

    /// A fetch grows the registry without looking for gone objects only while it registers
    /// the ones it returns: afterwards the context's registry drops the gone again when it grows.
    @Test @MainActor func aFetchTurnsSweepingBackOn() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<300 { try update.create(Person.self).name = "p\(index)" }
            try update.commit()
        }
        do {
            let people = try world.fetchAll(Person.self)
            #expect(people.count == 300)
        }
        #expect(world.core.registry.sweepsWhenGrowing)
        #expect(world.core.registry.count == 300, "the fetched people's slots stay until the registry grows")
        // Registering past the capacity grows the registry, which drops the 300 gone.
        let pets = try world.beginUpdateAndWait { update in
            let pets = try (0..<400).map { _ in try update.create(Pet.self) }
            try update.commit()
            return pets.map(\.objectID)
        }
        let held = try pets.map { try #require(try world.fetch(Pet.self, id: $0)) }
        #expect(world.core.registry.count == held.count)
    }

    /// A loop of fetches whose objects are let go between them keeps the registry at the size
    /// of what is alive: each fetch registers its objects with sweeping off, so without a look
    /// for gone objects before it (`dropGoneIfDue`), the table grew for the dead IDs alone.
    @Test @MainActor func fetchesWhoseObjectsAreLetGoDoNotGrowTheRegistry() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<5_000 { try update.create(Person.self).age = index }
            try update.commit()
        }
        world.reset()
        for round in 0..<50 {
            let people = try world.fetchAll(Person.self, %"age" >= round * 100 && %"age" < round * 100 + 100)
            #expect(people.count == 100)
        }
        #expect(world.core.registry.capacity < 1_000, "the registry grew for 5,000 gone objects: \(world.core.registry.capacity)")
    }

    /// A main context keeps the objects merged deletions took (`ContextCore.mergedDeletions`,
    /// in case such a deletion fails to save) only while they live: the entries of objects
    /// gone are dropped as the table grows, so deleting many objects nobody holds any more
    /// does not grow it without end.
    @Test @MainActor func objectsMergedDeletionsTookAreForgottenOnceGone() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<300 { try update.create(Person.self).age = index }
            try update.commit()
        }
        for batch in 0..<3 {
            var held: [Person]? = try world.fetchAll(Person.self, %"age" >= batch * 100 && %"age" < batch * 100 + 100)
            try world.beginUpdateAndWait { update in
                for person in try #require(held) { try update.delete(update.use(person)) }
                try update.commit()
            }
            #expect(try #require(held).allSatisfy(\.isDeleted))
            held = nil
        }
        #expect(world.core.mergedDeletions.count <= 128, "\(world.core.mergedDeletions.count) entries for 300 objects gone")
    }
}
