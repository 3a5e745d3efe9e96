@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// Persistent history (Docs/History.md): what each save records, tokens, purging, and other
/// stacks' commits reaching this stack's contexts, results and observers. Two stacks on one
/// file stand for two processes here (they share nothing but the file); real processes are in
/// `HistoryProcessTests`.
///
/// The time limit is generous: each `await` of a `@MainActor` test waits for its turn behind
/// every test body queued on the main actor meanwhile, which in a full run on 2 cores was seen
/// to take over a minute and a half.
/// A hierarchy with a many-to-many relationship: a commit may change nothing of a guest but
/// its clubs.
@Entity class ClubMember: ManagedObject {
    var name: String = ""
    @Relationship var clubs: Set<Club>
}

@Entity final class Guest: ClubMember {
    var host: String = ""
}

@Entity final class Club: ManagedObject {
    var title: String = ""
    @Relationship(inverse: \ClubMember.clubs) var members: Set<ClubMember>
}

@Suite(.timeLimit(.minutes(5))) struct HistoryTests {
    static let kinds = StoreKind.available.filter { $0 != .memory }

    /// Commits Ada, aged 36, from `world`; returns her ID.
    @MainActor static func commitAda(from world: MainContext) throws -> ObjectID {
        try world.beginUpdateAndWait { update in
            let ada = try update.create(Person.self)
            (ada.name, ada.age) = ("Ada", 36)
            try update.commit()
            return ada.objectID
        }
    }

    /// An object whose only change is a many-to-many pair is named by its own entity, a
    /// sub-entity's included, in the commit and in the history (Docs/History.md): its `ObjectID`
    /// names only the root, and the commit used to name it so (`Commit.updated(Guest.self)`
    /// missed it).
    @Test(arguments: kinds) @MainActor
    func aSubEntitysObjectChangedOnlyInAPairIsNamedByItsEntity(kind: StoreKind) async throws {
        let store = try TestStore(kind, types: [ClubMember.self, Guest.self, Club.self], tracksHistory: true)
        let world = try MainContext(stack: store.stack)
        let (guest, club) = try world.beginUpdateAndWait { update in
            let guest = try update.create(Guest.self)
            guest.name = "Ada"
            let club = try update.create(Club.self)
            club.title = "Chess"
            try update.commit()
            return (guest.objectID, club.objectID)
        }
        let commits = Locked<[Commit]>([])
        let observation = store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        try world.beginUpdateAndWait { update in
            let member = try #require(try update.fetch(Guest.self, id: guest))
            try #require(try update.fetch(Club.self, id: club)).members.insert(member)
            try update.commit()
        }
        try await store.stack.flush()
        await mainQueueTurn()
        try await store.settleHistory()
        let commit = try #require(commits.withLock { $0 }.last)
        #expect(commit.updated(Guest.self) == [guest])
        #expect(commit.entityName(of: guest) == "Guest")
        let changes = try #require(try store.stack.history(after: nil).last).changes
        #expect(Set(changes) == [HistoryChange(kind: .update, objectID: guest, entityName: "Guest", changedKeys: ["clubs"]),
                                 HistoryChange(kind: .update, objectID: club, entityName: "Club", changedKeys: ["members"])])

        // A pair removed without loading the member: the guest is named by its root entity.
        world.reset()
        try ContextStack.Context(stack: store.stack).beginUpdateAndWait { update in
            try #require(try update.fetch(Club.self, id: club)).members = []
            try update.commit()
        }
        try await store.stack.flush()
        try await store.settleHistory()
        let removed = try #require(try store.stack.history(after: nil).last).changes
        #expect(Set(removed) == [HistoryChange(kind: .update, objectID: guest, entityName: "ClubMember", changedKeys: ["clubs"]),
                                 HistoryChange(kind: .update, objectID: club, entityName: "Club", changedKeys: ["members"])], "\(removed)")
    }

    @Test(arguments: kinds) @MainActor
    func eachSaveRecordsWhatItChangedAndWho(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack, author: "app")
        let importer = try Context(stack: store.stack, updateTarget: .persistentStore, author: "importer")
        let (monk, rex) = try world.beginUpdateAndWait(Fixtures.monkAndPet)
        let importerCommits = Locked<[Commit]>([])
        let observation = importer.observeCommit { commit in importerCommits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        var appCommits: [Commit] = []
        let appObservation = world.observeCommit { appCommits.append($0) }
        defer { appObservation.cancel() }
        try importer.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: monk)).age = 40
            try update.commit()
        }
        let article = try world.beginUpdateAndWait { update in
            let article = try update.create(Article.self)
            try update.commit()
            return article.objectID
        }
        let tag = try world.beginUpdateAndWait { update in
            let tag = try update.create(Tag.self)
            try #require(try update.fetch(Article.self, id: article)).tags.insert(tag)
            try update.commit()
            return tag.objectID
        }
        try importer.beginUpdateAndWait { update in
            #expect(try update.batchUpdate(Pet.self, set: ["name": .text("Rex")]) == 1)
            try update.commit()
        }
        try world.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Pet.self, id: rex)))
            try update.commit()
        }
        try world.beginUpdateAndWait { update in
            try update.commit()    // nothing changed: no transaction
        }
        let (owner, pets) = try world.beginUpdateAndWait { update in
            let owner = try update.create(Person.self)
            owner.name = "Owner"
            let pets = try (0..<2).map { _ in try update.create(Pet.self) }
            for pet in pets { pet.owner = owner }
            try update.commit()
            return (owner.objectID, pets.map(\.objectID))
        }
        try importer.beginUpdateAndWait { update in
            // A batch delete, with the cascade to the pets.
            #expect(try update.batchDelete(Person.self, %"name" == "Owner") == 1)
            try update.commit()
        }
        try importer.beginUpdateAndWait { update in
            let inserted = try update.batchInsert(Tag.self, [["name": "imported"]])
            #expect(inserted == 1)
        }
        try await store.stack.flush()
        await mainQueueTurn()
        try await store.settleHistory()

        let history = try store.stack.history(after: nil)
        #expect(history.map(\.author) == ["app", "importer", "app", "app", "importer", "app", "app", "importer", "importer"])
        #expect(history.map(\.token) == history.map(\.token).sorted())
        #expect(Set(history.map(\.token)).count == history.count)
        func changes(_ index: Int) -> Set<HistoryChange> { Set(history[index].changes) }
        #expect(changes(0) == [HistoryChange(kind: .insert, objectID: monk, entityName: "Person", changedKeys: []),
                               HistoryChange(kind: .insert, objectID: rex, entityName: "Pet", changedKeys: [])])
        #expect(changes(1) == [HistoryChange(kind: .update, objectID: monk, entityName: "Person", changedKeys: ["age"])])
        #expect(changes(2) == [HistoryChange(kind: .insert, objectID: article, entityName: "Article", changedKeys: [])])
        // A many-to-many pair counts for both objects, under their relationships' names.
        #expect(changes(3) == [HistoryChange(kind: .insert, objectID: tag, entityName: "Tag", changedKeys: []),
                               HistoryChange(kind: .update, objectID: article, entityName: "Article", changedKeys: ["tags"])])
        #expect(changes(4) == [HistoryChange(kind: .update, objectID: rex, entityName: "Pet", changedKeys: ["name"])])
        #expect(changes(5) == [HistoryChange(kind: .delete, objectID: rex, entityName: "Pet", changedKeys: [])])
        #expect(changes(7) == Set([HistoryChange(kind: .delete, objectID: owner, entityName: "Person", changedKeys: [])]
            + pets.map { HistoryChange(kind: .delete, objectID: $0, entityName: "Pet", changedKeys: []) }))
        #expect(history[8].changes.map(\.kind) == [.insert] && history[8].changes.map(\.entityName) == ["Tag"])
        #expect(importerCommits.withLock { $0.last?.author } == "importer", "a batch insert's Commit names its author too")
        // Docs/History.md, "Tokens": a commit delivered once written (`.persistentStore`, batch
        // operations) carries its token on SQLite, where the writer numbers transactions
        // itself; one delivered before the root writes it has none, nor has any on PostgreSQL.
        let importerTokens = importerCommits.withLock { $0.map(\.token) }
        if kind != .postgres {
            #expect(importerTokens == [1, 4, 7, 8].map { history[$0].token })
        } else {
            #expect(importerTokens == [nil, nil, nil, nil])
        }
        #expect(appCommits.count == 4 && appCommits.allSatisfy { $0.token == nil }, "\(appCommits.map(\.token))")
        #expect(history.allSatisfy { abs($0.date.timeIntervalSinceNow) < 3600 })
    }

    @Test(arguments: kinds) @MainActor
    func tokensResumeAndPurgedHistoryExpires(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack)
        #expect(try store.stack.lastHistoryToken() == nil)
        for name in ["a", "b", "c", "d"] {
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
        }
        try await store.stack.flush()
        try await store.settleHistory()
        let all = try store.stack.history(after: nil)
        #expect(all.count == 4)
        #expect(try store.stack.lastHistoryToken() == all[3].token)
        // A token survives encoding, and resumes after its transaction.
        let saved = try JSONDecoder().decode(HistoryToken.self, from: JSONEncoder().encode(all[1].token))
        #expect(saved == all[1].token)
        #expect(try store.stack.history(after: saved).map(\.token) == [all[2].token, all[3].token])
        #expect(try store.stack.history(after: all[3].token).isEmpty)

        try store.stack.deleteHistory(before: all[2].token)
        // Transactions after these tokens are gone: the history cannot say what they did.
        for token in [nil, all[0].token] {
            #expect {
                try store.stack.history(after: token)
            } throws: { error in
                (error as? HistoryError)?.code == .expired
            }
        }
        // From the last deleted transaction on, nothing is missing.
        #expect(try store.stack.history(after: all[1].token).map(\.token) == [all[2].token, all[3].token])
        #expect(try store.stack.history(after: all[2].token).map(\.token) == [all[3].token])
    }

    /// A store tracking history that holds one commit, Ada's, written and settled in the history.
    @MainActor static func storeWithAda(_ kind: StoreKind) async throws -> TestStore {
        let store = try TestStore(kind, tracksHistory: true)
        try MainContext(stack: store.stack).beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ada"
            try update.commit()
        }
        try await store.stack.flush()
        try await store.settleHistory()
        return store
    }

    /// Reading the history does not hold the store's state lock, which every commit and the
    /// start of every read take: on PostgreSQL, a consumer catching up on a long history held
    /// them all up while its rows came and were decoded. Each history statement looks, as it
    /// starts, whether that lock is free.
    @Test(arguments: kinds) @MainActor
    func readingTheHistoryDoesNotHoldUpCommitsAndReads(kind: StoreKind) async throws {
        let store = try await Self.storeWithAda(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let heldDuring = Locked<[Bool]>([])
        store.stack.trace { sql in
            guard sql.contains("Z_HISTORY") else { return }
            heldDuring.withLock { $0.append(queued.state.withLockIfAvailable { _ in false } ?? true) }
        }
        #expect(try store.stack.history(after: nil).count == 1)
        #expect(try store.stack.lastHistoryToken() != nil)
        store.stack.trace(nil)
        let held = heldDuring.withLock { $0 }
        #expect(held.count >= 2, "\(held)")
        #expect(!held.contains(true), "the state lock was held during \(held.filter { $0 }.count) of \(held.count) history statements")
    }

    /// Docs/History.md, "Failure modes": changes stored in another format are an error, never
    /// changes misread.
    @Test(arguments: kinds) @MainActor
    func historyThatContextStackDidNotWriteIsAnErrorNotMisread(kind: StoreKind) async throws {
        let store = try await Self.storeWithAda(kind)
        #expect(try store.stack.history(after: nil).map(\.changes.count) == [1])
        // A blob with an unknown format byte.
        _ = try store.writtenRows(store.database == nil ? "UPDATE Z_HISTORY SET Z_CHANGES = x'02'"
                                                        : "UPDATE \"Z_HISTORY\" SET \"Z_CHANGES\" = '\\x02'::bytea")
        let error = try #require(throws: StoreError.self) { try store.stack.history(after: nil) }
        #expect(error.code == .corrupt)
    }

    @Test @MainActor func aFailedCommitLeavesNoHistory() async throws {
        let store = try TestStore(.file, tracksHistory: true)
        let world = try MainContext(stack: store.stack)
        try store.refuseWrites(ofName: "Refused")
        // A first object reserves a block of keys: the next ones need no write lock, which
        // another connection is about to hold.
        let seed = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            try update.commit()
            return person.objectID
        }
        try await store.stack.flush()
        // Three commits written together: the middle one fails alone, with its history.
        let (first, third) = try store.stack.sqliteStore.holdingWriter {
            let first = try world.beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                person.name = "First"
                try update.commit()
                return person.objectID
            }
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Refused"
                try update.commit()
            }
            let third = try world.beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                person.name = "Third"
                try update.commit()
                return person.objectID
            }
            return (first, third)
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        let history = try store.stack.history(after: nil)
        #expect(history.map { $0.changes.map(\.objectID) } == [[seed], [first], [third]])
        #expect(try store.writtenScalar("SELECT count(*) FROM Person") == .integer(3))
    }

    /// A commit a unique value refuses and one a `.deny` rule refuses, each between commits
    /// that are queued together and stored: both are refused at `commit()`, before they are
    /// queued, and leave no history; the others' transactions are all there is. (A failure
    /// inside a group, at the writer, is `aFailedCommitLeavesNoHistory`.)
    @Test @MainActor func aCommitAUniqueValueOrADenyRuleRefusesLeavesNoHistory() async throws {
        let store = try TestStore(.file, tracksHistory: true)
        store.stack.onError = { _ in }
        let world = try MainContext(stack: store.stack)
        let vault = try world.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.email) = ("Monk", "monk@example.org")
            let vault = try update.create(Vault.self)
            try update.create(Coin.self).vault = vault
            try update.commit()
            return vault.objectID
        }
        try await store.stack.flush()
        let stored = try store.stack.history(after: nil).count
        let written = try store.stack.sqliteStore.holdingWriter { () -> [ObjectID] in
            var written: [ObjectID] = []
            for step in 0..<5 {
                do {
                    try world.beginUpdateAndWait { update in
                        switch step {
                        case 1:
                            let copy = try update.create(Person.self)
                            (copy.name, copy.email) = ("Copy", "monk@example.org")
                        case 3:
                            // A vault denies its deletion while it holds coins.
                            try update.delete(#require(try update.fetch(Vault.self, id: vault)))
                        default:
                            let person = try update.create(Person.self)
                            person.name = "Step \(step)"
                            written.append(person.objectID)
                        }
                        try update.commit()
                    }
                } catch let error as SaveError {
                    #expect(step == 1 && error.code == .uniquenessViolated || step == 3 && error.code == .deleteDenied, "step \(step): \(error)")
                }
            }
            return written
        }
        try await store.stack.flush()
        let history = try store.stack.history(after: nil).dropFirst(stored)
        #expect(history.map { $0.changes.map(\.objectID) } == written.map { [$0] }, "\(history)")
        #expect(try store.writtenScalar("SELECT count(*) FROM Person") == .integer(4))
        #expect(try store.writtenScalar("SELECT count(*) FROM Vault") == .integer(1))
    }

    /// Without history — an in-memory store, a file or a PostgreSQL database that never had
    /// it — reading history or its last token throws `.notTracked` (Docs/History.md).
    @Test(arguments: StoreKind.available) func everyStoreWithoutHistorySaysSo(kind: StoreKind) throws {
        let store = try TestStore(kind, tracksHistory: false)
        let token = HistoryToken(position: 1)
        let calls: [() throws -> Void] = [{ _ = try store.stack.history(after: nil) }, { _ = try store.stack.lastHistoryToken() },
                                          { try store.stack.deleteHistory(before: token) }]
        for call in calls {
            #expect { try call() } throws: { ($0 as? HistoryError)?.code == .notTracked }
        }
    }

    @Test func storesThatDoNotTrackSaySo() throws {
        let store = try TestStore(.file, tracksHistory: false)
        #expect {
            try store.stack.history(after: nil)
        } throws: { error in
            (error as? HistoryError)?.code == .notTracked
        }
        // Several SQLite files cannot keep a save and its history together.
        let model = try Model(Person.self, Pet.self, Article.self, Tag.self,
                              configurations: ["people": [Person.self, Pet.self], "tags": [Article.self, Tag.self]])
        let several = try TestStore(model: model) { stack, directory in
            try stack.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "people", tracksHistory: true)
            #expect {
                try stack.addDatabaseStore(at: directory.appendingPathComponent("tags.sqlite"), configuration: "tags")
            } throws: { error in
                (error as? StoreError)?.code == .unsupported
            }
        }
        _ = several
        // Nor a file that tracks history already, added beside another store.
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let tags = directory.appendingPathComponent("tags.sqlite")
        do {
            let alone = try Stack(model: model)
            try alone.addDatabaseStore(at: tags, configuration: "tags", tracksHistory: true)
            try alone.flushAndWait()
        }
        let second = try Stack(model: model)
        try second.addDatabaseStore(at: directory.appendingPathComponent("people.sqlite"), configuration: "people")
        #expect {
            try second.addDatabaseStore(at: tags, configuration: "tags")
        } throws: { error in
            guard let error = error as? StoreError else { return false }
            return error.code == .unsupported && error.message.contains("tracks history") && error.message.contains("Add it as the stack's only store")
        }
    }

    /// Docs/History.md, "Turning it on": a stack that had the file open when another stack
    /// turned history on writes history from its next save, so the other stack's contexts get
    /// its commits; it follows theirs once something asks for remote commits after that save.
    /// Before, it wrote no history for as long as it ran, and the others never saw its saves.
    @Test @MainActor func aStackOpenBeforeHistoryWasTurnedOnWritesItFromItsNextSave() async throws {
        let store = try TestStore(.file)
        let early = try MainContext(stack: store.stack)
        try early.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ann"
            try update.commit()
        }
        try await store.stack.flush()
        let tracking = try Stack(model: Model(fullModelTypes))
        try tracking.addDatabaseStore(at: try #require(store.url), tracksHistory: true)
        let fromEarly = tracking.allCommits.filter(\.isRemote)
        var earlyCommits = fromEarly.makeAsyncIterator()
        let bob = try early.beginUpdateAndWait { update in
            let bob = try update.create(Person.self)
            bob.name = "Bob"
            try update.commit()
            return bob.objectID
        }
        try await store.stack.flush()
        let recorded = try tracking.history(after: nil)
        try #require(recorded.map { $0.changes.map(\.objectID) } == [[bob]], "Bob's save, and not Ann's from before history")
        #expect(try store.stack.history(after: nil).count == 1)
        #expect(try #require(await earlyCommits.next()).inserted == [bob])

        let fromTracking = store.stack.allCommits.filter(\.isRemote)
        var trackingCommits = fromTracking.makeAsyncIterator()
        let cy = try Context(stack: tracking, updateTarget: .persistentStore).beginUpdateAndWait { update in
            let cy = try update.create(Person.self)
            cy.name = "Cy"
            try update.commit()
            return cy.objectID
        }
        #expect(try #require(await trackingCommits.next()).inserted == [cy])
        try await tracking.flush()
    }

    /// The same page: a stack whose only file another stack has since turned history on for
    /// cannot add a second store (it could never write history then), even before its next
    /// save has noticed.
    @Test func aSecondStoreIsRefusedOnceAnotherStackTurnedHistoryOnForTheFirst() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let people = directory.appendingPathComponent("people.sqlite")
        let early = try Stack(model: splitModel())
        try early.addDatabaseStore(at: people, configuration: "Database")
        let tracking = try Stack(model: splitModel())
        try tracking.addDatabaseStore(at: people, configuration: "Database", tracksHistory: true)
        #expect {
            try early.addDatabaseStore(at: directory.appendingPathComponent("sessions.sqlite"), configuration: "InMemory")
        } throws: { error in
            guard let error = error as? StoreError else { return false }
            return error.code == .unsupported && error.message.contains("turned it on")
        }
        withExtendedLifetime(tracking) {}
    }

    /// A released stack leaves its file whole, without `-wal` (the writer's connection closes
    /// last and checkpoints it), also when the stack followed the history: its watcher's
    /// read-only connection, closed after the writer, used to leave the `-wal` behind.
    @Test(arguments: [false, true])
    func aReleasedStackLeavesNoWriteAheadLog(following: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("store.sqlite")
        do {
            let stack = try Stack(model: Model(fullModelTypes))
            try stack.addDatabaseStore(at: url, tracksHistory: true)
            if following { try stack.store.followHistory { _ in } }
            let context = try Context(stack: stack, updateTarget: .persistentStore)
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Ann"
                try update.commit()
            }
            #expect(try context.beginUpdateAndWait { try $0.fetchCount(Person.self) } == 1)
            #expect(FileManager.default.fileExists(atPath: url.path + "-wal"))
        }
        // The last reference may go on another thread (a watcher's look holds the store while
        // it runs): a bound against hanging, not a timing assertion.
        for _ in 0..<500 where FileManager.default.fileExists(atPath: url.path + "-wal") {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(!FileManager.default.fileExists(atPath: url.path + "-wal"))
    }

    // MARK: - Other stacks' commits

    /// A main context of a two-tier stack with auto-merge takes another stack's commits as a
    /// three-tier one does: the object it holds takes the new value (Docs/History.md, "What
    /// each topology does with a remote commit").
    @Test(arguments: kinds) @MainActor
    func otherStacksCommitsReachAnAutoMergingMainContext(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: true))
        let other = try store.reopen()
        let writer = try Context(stack: other, updateTarget: .persistentStore)
        let remote = store.stack.allCommits.filter(\.isRemote)
        var commits = remote.makeAsyncIterator()
        let ada = try Self.commitAda(from: world)
        try await store.stack.flush()
        await mainQueueTurn()
        let held = try #require(try world.fetch(Person.self, id: ada))
        try writer.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ada)).age = 37
            try update.commit()
        }
        let delivered = try #require(await commits.next())
        #expect(delivered.updated == [ada])
        #expect(held.age == 37, "the object the main context holds took the new value")
    }

    /// Docs/History.md, "Remote commits": a merging main context takes a remote commit's values
    /// with this process's queued, unwritten commits on top, so it shows what the store holds
    /// once they are written: the other stack's age, and this stack's name, which its queued
    /// commit writes over the other's.
    @Test(arguments: kinds) @MainActor
    func aRemoteCommitIsShownWithThisProcesssQueuedCommitsOnTop(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let world = try MainContext(stack: store.stack)
        let ada = try Self.commitAda(from: world)
        try await store.stack.flush()
        let held = try #require(try world.fetch(Person.self, id: ada))
        let writer = try Context(stack: try store.reopen(), updateTarget: .persistentStore)
        var commits = store.stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        var suspended = true
        defer { if suspended { queued.writeQueue.resume() } }
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ada)).name = "Ada L."
            try update.commit()
        }
        try writer.beginUpdateAndWait { update in
            let remote = try #require(try update.fetch(Person.self, id: ada))
            (remote.name, remote.age) = ("Augusta", 37)
            try update.commit()
        }
        let remote = try #require(await commits.next())
        #expect(remote.updated == [ada])
        #expect([held.name, String(held.age)] == ["Ada L.", "37"], "the queued name on top of the remote age")
        queued.writeQueue.resume()
        suspended = false
        try await store.stack.flush()
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text("Ada L."), .integer(37)]])
        #expect([held.name, String(held.age)] == ["Ada L.", "37"])
    }

    /// Another stack on the file (as another process would) inserts, updates and deletes:
    /// this stack's three-tier main context, its results and its observers follow, and each
    /// remote commit says what the history says.
    @Test(arguments: kinds) @MainActor
    func otherStacksCommitsReachContextsResultsAndObservers(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack)
        let other = try store.reopen()
        let writer = try Context(stack: other, updateTarget: .persistentStore, author: "worker")
        let remote = store.stack.allCommits.filter(\.isRemote)
        var commits = remote.makeAsyncIterator()
        // The main context's own observer and stream see only its own updates' commits.
        let ownSeen = Locked<[Commit]>([])
        let ownObserver = world.observeCommit { commit in ownSeen.withLock { $0.append(commit) } }
        let ownCommits = world.commits    // subscribed here, before the first commit
        let ownStream = Task { @MainActor in
            for await commit in ownCommits { ownSeen.withLock { $0.append(commit) } }
        }
        defer { ownStream.cancel() }

        let ada = try Self.commitAda(from: world)
        try await store.stack.flush()
        let held = try #require(try world.fetch(Person.self, id: ada))
        // A second main context, with no results reading it: only the remote commit it is
        // handed can change what it holds.
        let quiet = try MainContext(stack: store.stack)
        let quietHeld = try #require(try quiet.fetch(Person.self, id: ada))
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        var changes = results.changes.makeAsyncIterator()
        #expect(results.objects.map(\.name) == ["Ada"])

        let grace = try writer.beginUpdateAndWait { update in
            let grace = try update.create(Person.self)
            grace.name = "Grace"
            try #require(try update.fetch(Person.self, id: ada)).age = 37
            try update.commit()
            return grace.objectID
        }
        let first = try #require(await commits.next())
        #expect(first.isRemote && first.origin == .remote && first.author == "worker")
        #expect(first.inserted == [grace] && first.updated == [ada] && first.changedKeys(of: ada) == ["age"])
        #expect(first.token == (try other.lastHistoryToken()))
        #expect(held.age == 37, "the object the main context holds took the new value")
        #expect(quietHeld.age == 37, "the object the main context holds took the new value")
        #expect(results.objects.map(\.name) == ["Ada", "Grace"])
        let batch = try #require(await changes.next())
        #expect(!batch.isEmpty)
        #expect(try results.objects.map(\.objectID) == world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.objectID))

        try writer.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Person.self, id: ada)))
            try update.commit()
        }
        let second = try #require(await commits.next())
        #expect(second.deleted == [ada])
        #expect(held.isDeleted)
        #expect(results.objects.map(\.name) == ["Grace"])

        // This stack's own commits are never delivered as remote ones.
        let own = try world.beginUpdateAndWait { update in
            let own = try update.create(Person.self)
            own.name = "Own"
            try update.commit()
            return own.objectID
        }
        try await store.stack.flush()
        try writer.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Last"
            try update.commit()
        }
        let third = try #require(await commits.next())
        #expect(!third.inserted.contains(own) && third.inserted.count == 1)
        await mainQueueTurn()
        let seenByOwn = ownSeen.withLock { $0 }
        #expect(seenByOwn.allSatisfy { !$0.isRemote }, "\(seenByOwn)")
        #expect(seenByOwn.count == 4, "Ada's and Own's commits, each through the observer and the stream: \(seenByOwn)")
        withExtendedLifetime(ownObserver) {}
    }

    /// Docs/History.md, "Remote commits": nothing is pushed into a main context that does not
    /// merge — the object it holds keeps its values — but its pinned view covers this
    /// process's commits only, so a read of a row another process changed sees what is stored.
    @Test(arguments: kinds) @MainActor
    func aMainContextThatDoesNotMergeReadsWhatAnotherProcessStored(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let ada = try Self.commitAda(from: world)
        try await store.stack.flush()
        world.reset()
        let held = try #require(try world.fetch(Person.self, id: ada))
        #expect(held.age == 36)
        var remote = store.stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        let other = try store.reopen()
        try Context(stack: other, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ada)).age = 37
            try update.commit()
        }
        let commit = try #require(await remote.next())
        #expect(commit.updated == [ada])
        #expect(held.age == 36, "nothing was pushed into the context")
        #expect(try world.queryValue(Person.self, .select("age"), %"name" == "Ada") == .integer(37))
        #expect(try world.fetchCount(Person.self, %"age" == 37) == 1)
        world.reset()
        #expect(try world.fetch(Person.self, id: ada)?.age == 37)
    }

    /// A remote commit fires object observations and fetch streams, as a local one does.
    @Test(arguments: kinds) @MainActor
    func remoteCommitsFireObjectObservationsAndFetchStreams(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let world = try MainContext(stack: store.stack)
        let id = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = "Ada"
            try update.commit()
            return person.objectID
        }
        try await store.stack.flush()
        let person = try #require(try world.fetch(Person.self, id: id))
        let changes = Locked<[ObjectChange]>([])
        let observation = world.observe(person) { change in changes.withLock { $0.append(change) } }
        defer { observation.cancel() }
        var names = world.fetchAllStream(Person.self, orderBy: .ascending("name")).makeAsyncIterator()
        #expect(await names.next()?.map(\.name) == ["Ada"])
        var commits = store.stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        let other = try store.reopen()
        try Context(stack: other, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).name = "Ada Lovelace"
            try update.create(Person.self).name = "Grace"
            try update.commit()
        }
        _ = try #require(await commits.next())
        #expect(changes.withLock { $0 }.map(\.changedKeys) == [["name"]])
        #expect(await names.next()?.map(\.name) == ["Ada Lovelace", "Grace"])
    }

    /// Docs/History.md, "Remote commits": a stack follows its store's history from the moment
    /// it has something to deliver remote commits to — a `MainContext`, a stack-wide
    /// `observeCommit`, or `allCommits` — and once, however many want them. A stack with only
    /// `Context`s, committing and reading, starts no watcher or listener (nor its connection).
    @Test(arguments: kinds, ["MainContext", "observeCommit", "allCommits"]) @MainActor
    func aStackFollowsTheHistoryOnlyOnceSomethingWantsRemoteCommits(kind: StoreKind, wanting: String) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        func followers() -> Int? {
            switch store.stack.store {
            case let file as SQLiteStore: file.watchers.withLock { $0.count }
            case let server as PostgresStore: server.listeners.withLock { $0.count }
            default: nil
            }
        }
        let context = try Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ada"
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try context.beginUpdateAndWait { try $0.fetchAll(Person.self).map(\.name) } == ["Ada"])
        #expect(followers() == 0)
        var kept: [Any] = []
        switch wanting {
        case "MainContext": kept.append(try MainContext(stack: store.stack))
        case "observeCommit": kept.append(store.stack.observeCommit { _ in })
        default: kept.append(store.stack.allCommits)
        }
        #expect(followers() == 1)
        kept += [try MainContext(stack: store.stack), store.stack.observeCommit { _ in }, store.stack.allCommits]
        #expect(followers() == 1)
        withExtendedLifetime(kept) {}
    }

    /// Following the history runs no statement that `stack.trace` shows.
    @Test(arguments: kinds) @MainActor
    func followingTheHistoryIsNotTraced(kind: StoreKind) async throws {
        let store = try TestStore(kind, tracksHistory: true)
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        // Starting to follow (at the first main context) reads where to start: not traced either.
        let world = try MainContext(stack: store.stack)
        let other = try store.reopen()
        var commits = store.stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        try Context(stack: other, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try update.create(Person.self).name = "Elsewhere"
            try update.commit()
        }
        _ = try #require(await commits.next())
        #expect(statements.withLock { $0 }.isEmpty, "\(statements.withLock { $0 })")
        withExtendedLifetime(world) {}
    }

    /// A per-consumer main context resets on a remote commit; one that does not merge keeps
    /// the objects it holds as they were.
    @Test(arguments: kinds) @MainActor
    func perConsumerContextsReset(kind: StoreKind) async throws {
        let store = try TestStore(kind, rootContext: .none, tracksHistory: true)
        let updater = try Context(stack: store.stack, updateTarget: .persistentStore)
        let screen = try MainContext(stack: store.stack, updateTarget: .persistentStore, resetOnCommitOf: updater)
        let id = try updater.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = "Before"
            try update.commit()
            return person.objectID
        }
        await mainQueueTurn()
        let person = try #require(try screen.fetch(Person.self, id: id))
        let pinned = try MainContext(stack: store.stack, updateTarget: .persistentStore)
        let pinnedPerson = try #require(try pinned.fetch(Person.self, id: id))
        let other = try store.reopen()
        let remote = store.stack.allCommits.filter(\.isRemote)
        var commits = remote.makeAsyncIterator()
        try Context(stack: other, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).name = "After"
            try update.commit()
        }
        _ = try #require(await commits.next())
        // The reset invalidated what the context held; a fetch shows the new value.
        #expect(try screen.fetch(Person.self, id: id)?.name == "After")
        #expect(person !== (try screen.fetch(Person.self, id: id)))
        #expect(pinnedPerson.name == "Before", "nothing is pushed into a main context that does not merge")
    }
}

extension SQLiteStore {
    /// Runs `body` while another connection holds the file's write lock, so the commits it
    /// makes queue up and are written together, in one group, once `body` returns.
    func holdingWriter<T>(_ body: () throws -> T) throws -> T {
        guard let url = parts.first?.url else { preconditionFailure("only file stores") }
        let other = try Connection(path: url.path)
        try other.execute("BEGIN IMMEDIATE")
        let result = try body()
        try other.execute("COMMIT")
        return result
    }
}
