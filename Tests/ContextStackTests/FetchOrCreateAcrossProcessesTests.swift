@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import Foundation
import Testing

/// `fetchOrCreate` when another process saves the same unique values first: two stacks on one
/// store stand for two processes (they share nothing but the database). No duplicate, no error:
/// the object the second `fetchOrCreate` made is merged into the saved row, this commit winning
/// on the values it gave, as the second of two `fetchOrCreate`s in one process merges
/// (Docs/Writing.md, Docs/Postgres.md).
@Suite struct FetchOrCreateAcrossProcessesTests {
    /// The other process saves between this `fetchOrCreate` and this commit.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func theSecondCommitMergesIntoTheSavedRow(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let world = try MainContext(stack: store.stack)
        let pets = try world.beginUpdateAndWait { update -> Int in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
            monk.name = "Monk"
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = monk
            // Meanwhile, in the other process:
            try otherUpdater.beginUpdateAndWait { update in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.age = 63
                monk.location = "Kyoto"
                try update.commit()
            }
            try update.commit()
            return 1
        }
        try await store.stack.flush()
        #expect(pets == 1)
        let people = try world.fetchAll(Person.self, %"email" == "monk@example.org")
        #expect(people.count == 1)
        #expect(people.first.map { [$0.name, String($0.age), $0.location ?? "-"] } == ["Monk", "63", "Kyoto"])
        #expect(people.first?.pets.map(\.name) == ["Rex"], "the pet points at the saved row")
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1))
        let otherWorld = try MainContext(stack: other)
        #expect(try otherWorld.fetch(Person.self, %"email" == "monk@example.org")?.name == "Monk")
    }

    /// The other process saves while this commit is on its way: it has inserted the values and
    /// not committed when `commit()` checks. The writer waits for it (for the file's write lock
    /// on SQLite; on PostgreSQL its insert meets the other's on the unique index, and it tries
    /// again from a savepoint), merges, and tells the main context that the object it was shown
    /// is gone and the saved one changed.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func theWriterMergesWhatAnotherProcessSavesWhileItWrites(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let commits = Locked<[Commit]>([])
        let observation = store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        // A first object reserves a block of keys: the next ones need no write lock (which the
        // other process is about to hold on SQLite).
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        try await store.stack.flush()

        let insert = "INSERT INTO \"Person\" (\"Z_PK\", name, age, email) VALUES (1000000, 'Saved', 40, 'monk@example.org')"
        var otherPostgres: PostgresConnection?
        var otherSQLite: Connection?
        if let url = store.database?.url {
            let other = try PostgresConnection(PostgresSettings(url: url))
            try other.execute("BEGIN")
            try other.execute(insert)
            otherPostgres = other
        } else {
            let other = try store.rawConnection()
            try other.execute("BEGIN IMMEDIATE")
            try other.execute(insert)
            otherSQLite = other
        }
        let made = try world.beginUpdateAndWait { update -> ObjectID in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
            monk.age = 63
            try update.commit()
            return monk.objectID
        }
        if let other = otherPostgres.take(), let url = store.database?.url {
            // Off the main actor: the other transaction must not wait for this test's turn on
            // it, which other tests can keep for a minute (and every PostgreSQL test's history
            // waits for the oldest open transaction of the server).
            #expect(try await commitOnceAWriterWaits(other, url: url), "the writer never waited for the other transaction")
        }
        try otherSQLite?.execute("COMMIT")
        try await store.stack.flush()
        await mainQueueTurn()

        #expect(try store.writtenRows("SELECT \"Z_PK\", name, age FROM \"Person\" WHERE email IS NOT NULL") == [[.integer(1_000_000), .text("Saved"), .integer(63)]])
        #expect(try world.fetchAll(Person.self, %"email" != nil).map(\.objectID.primaryKey) == [1_000_000])
        let seen = commits.withLock { $0 }
        #expect(seen.contains { $0.deleted.contains(made) }, "the object the main context was shown is gone")
        #expect(seen.contains { $0.updated.contains { $0.primaryKey == 1_000_000 } })
    }
}
