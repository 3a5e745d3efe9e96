@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Two updates read the same object; the second commits after the first. `policy` decides.
@Suite struct ConflictTests {
    /// Returns the sample as stored after: A sets int = 1 (and string = "A" when `alsoString`),
    /// committed first; B, which read the object before A committed, sets int = 2 and
    /// double = 2 and commits second under `policy`.
    @MainActor func race(_ policy: MergePolicy, bothChangeInt: Bool = true) throws -> (Sample?, (any Error)?) {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, mergePolicy: policy)
        let id = try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            try update.commit()
            return sample.objectID
        }
        let b = world.beginUpdateContext()
        // B reads the object and keeps it (unchanged objects are held weakly by their context).
        let held = try b.performAndWait { update in try update.fetch(Sample.self, id: id) }
        try world.beginUpdateAndWait { update in
            let sample = try #require(try update.fetch(Sample.self, id: id))
            if bothChangeInt { sample.int = 1 }
            sample.string = "A"
            try update.commit()
        }
        var failure: (any Error)?
        do {
            try b.performAndWait { update in
                let sample = try #require(held)
                sample.int = 2
                sample.double = 2
                try update.create(Pet.self).name = "B's"
                try update.commit()
            }
        } catch {
            failure = error
        }
        return (try world.fetch(Sample.self, id: id), failure)
    }

    @Test @MainActor func objectTrumpKeepsBothSidesChangesAndOursWinsTheSameKey() throws {
        let (sample, error) = try race(.objectTrump)
        #expect(error == nil)
        #expect(sample?.int == 2)
        #expect(sample?.string == "A")
        #expect(sample?.double == 2)
    }

    @Test @MainActor func storeTrumpKeepsTheStoredValueForKeysChangedInTheStore() throws {
        let (sample, error) = try race(.storeTrump)
        #expect(error == nil)
        #expect(sample?.int == 1)
        #expect(sample?.string == "A")
        #expect(sample?.double == 2)
    }

    @Test @MainActor func overwriteSavesTheWholeObjectAsWeHaveIt() throws {
        let (sample, error) = try race(.overwrite)
        #expect(error == nil)
        #expect(sample?.int == 2)
        #expect(sample?.string == "default")  // A's change is overwritten
        #expect(sample?.double == 2)
    }

    @Test @MainActor func rollbackDropsOurChangesToTheConflictingObject() throws {
        let (sample, error) = try race(.rollback)
        #expect(error == nil)
        #expect(sample?.int == 1)
        #expect(sample?.string == "A")
        #expect(sample?.double == 0)
    }

    @Test @MainActor func errorThrowsWithSnapshotStoredAndOursAndSavesNothing() throws {
        let store = try TestStore(.memory)
        _ = store
        let (sample, error) = try race(.error)
        let conflict = try #require(error as? MergeConflictError)
        #expect(conflict.objectIDs == [sample!.objectID])
        let int = try #require(conflict.conflicts.first { $0.key == "int" })
        #expect(int.snapshot == .integer(0) && int.stored == .integer(1) && int.ours == .integer(2))
        #expect(conflict.conflicts.contains { $0.key == "string" && $0.stored == .text("A") && $0.ours == .text("default") })
        #expect(sample?.int == 1 && sample?.double == 0)
        #expect(try sample.map { try $0.context.fetchCount(Pet.self, nil) } == 0)
    }

    @Test @MainActor func noConflictWhenTheStoreDidNotChange() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, mergePolicy: .error)
        try world.beginUpdateAndWait { update in
            try update.create(Sample.self)
            try update.commit()
        }
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Sample.self)).int = 5
            try update.commit()
        }
        #expect(try world.fetch(Sample.self)?.int == 5)
    }
}
