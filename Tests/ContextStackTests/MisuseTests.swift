@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Misuse fails on the offending line, with a message saying what to do instead.
@Suite struct MisuseTests {
    /// A main context holding one person and one pet.
    @MainActor static func world() throws -> (TestStore, MainContext) {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Farmer"
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        return (store, world)
    }

    @Test func settingAPropertyOfAMainContextObjectTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let pet = try #require(try world.fetch(Pet.self))
                pet.name = "changed"
                _ = store
            }
        }
        expectTrapMessage(result, contains: "whose objects are read-only", "try update.use(object)")
    }

    /// Docs/Errors.md, "Misuse": `apply(_:expecting:)` with the snapshots of two different
    /// objects traps on that line, saying which snapshot to pass.
    @Test func applyExpectingASnapshotOfAnotherObjectTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let store = try TestStore(.memory)
            let context = try Context(stack: store.stack)
            try context.beginUpdateAndWait { update in
                for name in ["Ann", "Bob"] { try update.create(Person.self).name = name }
                try update.commit()
            }
            let people = try await context.snapshots(Person.self, orderBy: .ascending("name"))
            try context.beginUpdateAndWait { update in try update.apply(people[0], expecting: people[1]) }
            _ = store
        }
        expectTrapMessage(result, contains: "the expected snapshot must be of the same object", "pass the snapshot the client read before editing it")
    }

    /// `stack.onError` runs on the writer, in the middle of its turn: waiting there for writes
    /// would wait for the writer itself, for ever. It traps on that line, naming what to do
    /// instead.
    @Test func waitingForWritesInsideOnErrorTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try store.refuseWrites(ofName: "refused")
                let stack = store.stack
                stack.onError = { _ in try? stack.flushAndWait() }
                try world.beginUpdateAndWait { update in
                    try update.create(Person.self).name = "refused"
                    try update.commit()
                }
            }
            try await Task.sleep(for: .seconds(30))    // the writer traps meanwhile
        }
        expectTrapMessage(result, contains: "inside stack.onError", "Task { try await stack.flush() }")
    }

    /// The other waits for writes inside `onError` that Docs/Concurrency.md names: a commit to
    /// `.persistentStore`, which waits to be written, and a batch operation trap the same way.
    @Test(arguments: ["a commit to the persistent store", "a batch operation"])
    func otherWaitsForWritesInsideOnErrorTrap(wait: String) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [wait = wait as String] in
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try store.refuseWrites(ofName: "refused")
                let stack = store.stack
                stack.onError = { _ in
                    let context = try? Context(stack: stack, updateTarget: .persistentStore)
                    try? context?.beginUpdateAndWait { update in
                        if wait == "a batch operation" {
                            _ = try update.batchDelete(Pet.self)
                        } else {
                            try update.create(Pet.self).name = "from onError"
                            try update.commit()
                        }
                    }
                }
                try world.beginUpdateAndWait { update in
                    try update.create(Person.self).name = "refused"
                    try update.commit()
                }
            }
            try await Task.sleep(for: .seconds(30))    // the writer traps meanwhile
        }
        expectTrapMessage(result, contains: "inside stack.onError")
    }

    @Test func relatingObjectsOfTwoContextsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let farmer = try #require(try world.fetch(Person.self))
                try world.beginUpdateAndWait { update in
                    let pet = try update.create(Pet.self)
                    pet.owner = farmer  // should be `try update.use(farmer)`
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "they belong to different contexts", "try update.use(other)")
    }

    @Test func touchingAnUpdateObjectOutsideItsUpdateTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let escaped = try world.beginUpdateAndWait { update in try update.create(Pet.self) }
                _ = escaped.name
                _ = store
            }
        }
        expectTrapMessage(result, contains: "used outside its update", "pass its objectID")
    }

    /// Docs/Servers.md: an object taken out of a `transaction` — it compiles, `ManagedObject`
    /// being `Sendable` — traps where it is used after the transaction returns, naming the fix.
    @Test func usingAnObjectTakenOutOfATransactionTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let store = try TestStore(.memory)
            let context = try Context(stack: store.stack, updateTarget: .persistentStore)
            let escaped = try await context.transaction { update in
                let person = try update.create(Person.self)
                person.name = "Ann"
                return person
            }
            _ = escaped.name
            _ = store
        }
        expectTrapMessage(result, contains: "used outside its update", "pass its objectID")
    }

    @Test func touchingAMainContextObjectOffTheMainActorTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let pet = try await MainActor.run { () -> Pet in
                let (store, world) = try MisuseTests.world()
                _ = Unmanaged.passRetained(store)  // keep the store alive for the detached read
                return try #require(try world.fetch(Pet.self))
            }
            await Task.detached { _ = pet.name }.value
        }
        expectTrapMessage(result, contains: "is used off the main actor", "try update.use(object)")
    }

    @Test func usingAMainContextObjectAfterResetTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let pet = try #require(try world.fetch(Pet.self))
                world.reset()
                _ = pet.name
                _ = store
            }
        }
        expectTrapMessage(result, contains: "after its MainContext was reset", "fetch it again")
    }

    @Test func changingADeletedObjectTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let pet = try #require(try update.fetch(Pet.self))
                    try update.delete(pet)
                    pet.name = "zombie"
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "is deleted in this update", "cannot be changed")
    }

    /// Also once the update committed the delete: the object is not one found deleted below
    /// the context (which fails the commit instead), and changing it is the same misuse.
    @Test func changingAnObjectAfterCommittingItsDeleteTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let pet = try #require(try update.fetch(Pet.self))
                    try update.delete(pet)
                    try update.commit()
                    pet.name = "zombie"
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "is deleted in this update", "cannot be changed")
    }

    /// Relating another object to it, the same.
    @Test func relatingAnObjectAfterCommittingItsDeleteTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let pet = try #require(try update.fetch(Pet.self))
                    let owner = try #require(try update.fetch(Person.self))
                    try update.delete(owner)
                    try update.commit()
                    pet.owner = owner
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "is deleted in this update")
    }

    /// An object created and deleted in an update is one the update created: after
    /// `rollback()`, using it traps as using the others it created does.
    @Test func usingAnObjectCreatedAndDeletedAfterRollbackTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let pet = try update.create(Pet.self)
                    try update.delete(pet)
                    update.rollback()
                    _ = pet.name
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "rolled back")
    }

    @Test func usingAnUpdateOutsideItsBlockTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let leaked = try world.beginUpdateAndWait { update in update }
                _ = try leaked.fetchAll(Pet.self)
                _ = store
            }
        }
        expectTrapMessage(result, contains: "was called outside its update", "only inside that block")
    }

    /// The same operations done right do not trap (so the exit tests above fail for the right reason).
    @Test @MainActor func theRightWayWorks() throws {
        let (store, world) = try Self.world()
        let farmer = try #require(try world.fetch(Person.self))
        let pet = try #require(try world.fetch(Pet.self))
        try world.beginUpdateAndWait { update in
            try update.use(pet).owner = try update.use(farmer)
            try update.use(pet).name = "changed"
            try update.commit()
        }
        #expect(pet.name == "changed")
        #expect(pet.owner === farmer)
        _ = store
    }
}

@Suite struct ReentrancyMisuseTests {
    @Test func performAndWaitFromInsideItsOwnBlockTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let context = world.beginUpdateContext()
                try context.performAndWait { _ in
                    try context.performAndWait { _ in }
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "would wait for itself forever", "use perform { }")
    }

    /// The same from inside a `perform` block (Docs/Concurrency.md, "Waiting"): the block runs
    /// on the context's queue, which `performAndWait` would wait for.
    @Test func performAndWaitFromInsideItsOwnPerformTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let store = try TestStore(.memory)
            let context = try Context(stack: store.stack).beginUpdateContext()
            context.perform { _ in
                try context.performAndWait { _ in }
            }
            // The trap comes on the context's queue; without it, the process ends well.
            try await Task.sleep(for: .seconds(10))
            _ = store
        }
        expectTrapMessage(result, contains: "would wait for itself forever", "use perform { }")
    }

    // The traps Docs/Errors.md and GettingStarted.md list besides those above.

    @Test func fetchingBeforeAStoreIsAddedTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let stack = try Stack(model: Model(fullModelTypes))
                let world = try MainContext(stack: stack)
                _ = try world.fetchAll(Person.self)
            }
        }
        expectTrapMessage(result, contains: "The stack has no store yet", "addDatabaseStore(at: url)")
    }

    @Test func creatingAnObjectOfAnEntityOutsideTheModelTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in _ = try update.create(Stranger.self) }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "Stranger is not in this stack's model", "add it to Model(...)")
    }

    @Test func deletingAnotherContextsObjectTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                let pet = try #require(try world.fetch(Pet.self))
                try world.beginUpdateAndWait { update in try update.delete(pet) }  // should be `update.use(pet)`
                _ = store
            }
        }
        expectTrapMessage(result, contains: "belongs to another context", "try update.delete(update.use(object))")
    }

    @Test func usingAnObjectAfterItsUpdateRolledBackTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let pet = try update.create(Pet.self)
                    update.rollback()
                    pet.name = "after the rollback"
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "was used after its update was rolled back", "fetch it again by its objectID")
    }

    @Test func relatingAnObjectToOneDeletedInTheUpdateTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try MisuseTests.world()
                try world.beginUpdateAndWait { update in
                    let farmer = try #require(try update.fetch(Person.self))
                    let pet = try #require(try update.fetch(Pet.self))
                    try update.delete(farmer)
                    pet.owner = farmer
                }
                _ = store
            }
        }
        expectTrapMessage(result, contains: "Cannot relate", "is deleted in this update")
    }
}
