@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// A commit handed to a merging main context before the root wrote it, whose write then
/// fails: the main context (and observers) are told what undoes it, so they show what is stored.
@Suite struct FailedSaveTests {
    /// Without a root, a commit whose write fails throws, and the main context never shows it.
    @Test @MainActor func aFailedWriteWithoutRootIsNotHandedToTheMainContext() throws {
        let store = try TestStore(.file, rootContext: .none)
        let world = try MainContext(stack: store.stack)
        try store.refuseWrites(ofName: "refused")
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "a"
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        let rex = try #require(try world.fetch(Pet.self))
        #expect(throws: SQLiteError.self) {
            try world.beginUpdateAndWait { update in
                try update.use(rex).name = "Renamed"
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
        }
        #expect(rex.name == "Rex")
        #expect(try world.fetch(Pet.self)?.name == "Rex")
        #expect(try world.fetchCount(Person.self) == 1)
    }

    static let mergingTargets: [UpdateTarget] = [.mainContext, .rootContext(autoMerge: true)]

    @Test(arguments: mergingTargets) @MainActor
    func aFailedBackgroundSaveIsUndoneInMergingMainContexts(target: UpdateTarget) async throws {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack, updateTarget: target)
        try world.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            monk.age = 63
            try update.commit()
        }
        try await store.stack.flush()
        let monk = try #require(try world.fetch(Person.self, %"name" == "Monk"))
        try store.refuseWrites(ofName: "refused")
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_age" BEFORE UPDATE ON main."Person" WHEN NEW.age = 99
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        // Both changes in one commit, which the root then fails to write — not before the main
        // context has shown them: the test holds the writer until then.
        let refused = try store.stack.sqliteStore.writer.withLock { _ in
            try world.beginUpdateAndWait { update in
                try update.use(monk).age = 99
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            return try #require(try world.fetch(Person.self, %"name" == "refused"))
        }
        #expect(monk.age == 99)
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        // The next read — one that does not refetch them — brings the objects held back to
        // what is stored: the change undone, the insert gone.
        #expect(try world.fetchCount(Person.self, %"age" == 99) == 0)
        #expect(monk.age == 63)
        #expect(refused.isDeleted)
        #expect(try world.fetchAll(Person.self).map(\.name) == ["Monk"])
        #expect(recorder.all.count == 1)
    }
}
