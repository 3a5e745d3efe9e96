@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Following other stacks' history through what goes wrong on the way (Docs/History.md,
/// "Failure modes"): a failed read, a follower that cannot start, another stack's transaction
/// held back while this stack keeps committing. Once following started, remote commits are
/// delayed by such things and never lost.
///
/// These tests count deliveries off the main actor, so a busy main actor cannot make them slow.
/// The waits for a delivery are bounds against hanging (ten seconds for what takes
/// milliseconds), not timing assertions.
@Suite(.timeLimit(.minutes(2))) struct HistoryFollowingTests {
    /// Waits until `delivered` holds at least `count` transactions, or ten seconds passed.
    private func wait(for count: Int, in delivered: Locked<[RemoteTransaction]>) async throws {
        for _ in 0..<1000 where delivered.withLock({ $0.count }) < count {
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Commits one person in `stack`, durably.
    private func commitAPerson(in stack: Stack, named name: String) throws {
        try Context(stack: stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try update.create(Person.self).name = name
            try update.commit()
        }
    }

    /// A store of `kind` with history whose stack follows it, recording what it delivers and
    /// what goes to `onError`.
    private func following(_ kind: StoreKind) throws -> (TestStore, ErrorRecorder, Locked<[RemoteTransaction]>) {
        let store = try TestStore(kind, tracksHistory: true)
        let errors = ErrorRecorder()
        store.stack.onError = { errors.record($0) }
        let delivered = Locked<[RemoteTransaction]>([])
        try store.stack.store.followHistory { transactions in delivered.withLock { $0 += transactions } }
        return (store, errors, delivered)
    }

    /// SQLite: the watcher saw the file change, then failed to read the history. It reads
    /// again at its next look, though nothing else is committed; the failures are one error.
    @Test func aFailedHistoryReadIsReadAgainWithoutAnotherCommit() async throws {
        let (store, errors, delivered) = try following(.file)
        let watcher = try #require(store.stack.sqliteStore.watchers.withLock { $0.last })
        watcher.failingReads.withLock { $0 = 3 }

        let other = try store.reopen()
        try commitAPerson(in: other, named: "Elsewhere")
        try await wait(for: 1, in: delivered)

        #expect(delivered.withLock { $0.count } == 1, "the failed reads consumed the change: the commit was never read")
        #expect(watcher.failingReads.withLock { $0 } == 0)
        #expect(errors.all.count == 1, "three failed reads in a row are one error: \(errors.all)")
    }

    /// Waits until `errors` holds a `HistoryError` `.expired`, or ten seconds passed.
    private func waitForExpiry(in errors: ErrorRecorder) async throws -> Bool {
        func expired() -> Bool { errors.all.contains { ($0 as? HistoryError)?.code == .expired } }
        for _ in 0..<1000 where !expired() { try await Task.sleep(for: .milliseconds(10)) }
        return expired()
    }

    /// Docs/History.md, "Failure modes": a history row whose changes cannot be read (written by
    /// something else than ContextStack, or by a later version's format) is passed over with a
    /// `.corrupt` error to `onError`, once, and the transactions after it are delivered. Before,
    /// every read of the follower stopped at it, and nothing more was delivered, ever.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func anUnreadableHistoryRowIsPassedOverAndSaidSo(kind: StoreKind) async throws {
        let (store, errors, delivered) = try following(kind)
        let other = try store.reopen()
        try commitAPerson(in: other, named: "Before")
        try await wait(for: 1, in: delivered)
        let before = try other.lastHistoryToken()
        if let url = store.database?.url {
            try PostgresConnection(PostgresSettings(url: url)).execute("""
                INSERT INTO "Z_HISTORY" VALUES (pg_current_xact_id()::text::bigint, 0, 0, NULL, 0, 'elsewhere', '\\xff'::bytea)
                """)
        } else {
            try store.rawConnection().execute("INSERT INTO Z_HISTORY (Z_DATE, Z_AUTHOR, Z_ORIGIN, Z_STACK, Z_CHANGES) VALUES (0, NULL, 0, 'elsewhere', x'ff')")
        }
        try commitAPerson(in: other, named: "After")
        try await wait(for: 2, in: delivered)
        let tokens = [before, try other.lastHistoryToken()]
        #expect(delivered.withLock { $0.map(\.transaction.token) } == tokens, "Before and After, not the unreadable row")
        #expect(throws: StoreError.self) { try other.history(after: before) }
        try commitAPerson(in: other, named: "Later")
        try await wait(for: 3, in: delivered)
        #expect(delivered.withLock { $0.count } == 3)
        let corrupt = errors.all.compactMap { $0 as? StoreError }.filter { $0.code == .corrupt }
        #expect(corrupt.count == 1 && errors.all.count == 1, "\(errors.all)")
        #expect(corrupt.first?.message.contains("was not delivered to this stack") == true)
    }

    /// Docs/History.md, "Tokens" (PostgreSQL): a transaction is listed by `history(after:)`, and
    /// counts for `lastHistoryToken()`, only once every older one has ended. Here an older
    /// transaction writes its history row and stays open while a newer one commits: neither is
    /// listed, and no token passes the older one; once it commits, both are, older first —
    /// so resuming from a token never skips a transaction that committed late.
    @Test(.enabled(if: PostgresServer.isAvailable)) func aTransactionIsListedOnlyOnceEveryOlderOneEnded() async throws {
        let store = try TestStore(.postgres, tracksHistory: true)
        let url = try #require(store.database?.url)
        try commitAPerson(in: store.stack, named: "First")
        try await settleHistory(url)
        let first = try #require(try store.stack.lastHistoryToken())
        let person = try #require(store.stack.graph.entity(named: "Person"))
        let blob = HistoryEncoding.encode([HistoryChange(kind: .insert, objectID: ObjectID(rootEntity: person.rootDescription, primaryKey: 1_000_000),
                                                         entityName: "Person", changedKeys: [])])
        let older = try PostgresConnection(PostgresSettings(url: url))
        try older.execute("BEGIN")
        let olderID = try #require(try older.scalar("SELECT pg_current_xact_id()::text::bigint").int64Value)
        try older.run("INSERT INTO \"Z_HISTORY\" VALUES (pg_current_xact_id()::text::bigint, 1, 0, NULL, 0, 'elsewhere', ?)", [.blob(blob)])
        try commitAPerson(in: store.stack, named: "Newer")
        #expect(try store.stack.history(after: first).isEmpty, "the newer transaction waits for the older")
        #expect(try store.stack.lastHistoryToken() == first)
        try older.execute("COMMIT")
        try await settleHistory(url)
        let listed = try store.stack.history(after: first)
        #expect(listed.count == 2)
        #expect(listed.first?.token.position == olderID)
        #expect(listed.first?.changes.map(\.objectID.primaryKey) == [1_000_000])
        #expect(try store.stack.lastHistoryToken() == listed.last?.token)
        #expect(listed.last.map { $0.token.position > olderID } == true)
    }

    /// Docs/History.md, "Purging": a stack's own watcher whose position was purged before it
    /// read says so with `.expired` through `onError`, once, and goes on from the last deleted
    /// transaction: every transaction the purge kept reaches it, also those committed before
    /// the error was reported, and nothing purged does. SQLite: the watcher is kept from
    /// reading (its reads fail) while another stack commits twice and purges the first of the
    /// two.
    @Test func aWatcherWhosePositionWasPurgedSaysSoAndGoesOn() async throws {
        let (store, errors, delivered) = try following(.file)
        let watcher = try #require(store.stack.sqliteStore.watchers.withLock { $0.last })
        watcher.failingReads.withLock { $0 = .max }
        let other = try store.reopen()
        try commitAPerson(in: other, named: "Purged")
        try commitAPerson(in: other, named: "Kept")
        let kept = try #require(try other.lastHistoryToken())
        try other.deleteHistory(before: kept)
        watcher.failingReads.withLock { $0 = 0 }

        #expect(try await waitForExpiry(in: errors), "\(errors.all)")
        try commitAPerson(in: other, named: "After")
        try await wait(for: 2, in: delivered)
        #expect(delivered.withLock { $0.map(\.transaction.token) } == [kept, try other.lastHistoryToken()],
                "the watcher went on after the purge: the kept transaction and the next one reached it, nothing purged did")
        #expect(errors.all.filter { ($0 as? HistoryError)?.code == .expired }.count == 1, "\(errors.all)")
    }

    /// The same on PostgreSQL, where the listener can find the purge while the transaction
    /// the purge kept is still held back by an older one: it reports the error then, and
    /// delivers the kept transaction once the older one ends, and the next one. (It used to go
    /// on from the newest settled transaction: found while the kept one was held back, that
    /// was still before the purge, so a later read jumped again — over a commit made after
    /// the error was reported.)
    @Test(.enabled(if: PostgresServer.isAvailable, "PostgreSQL suites need a server"))
    func aListenerWhosePositionWasPurgedSaysSoAndGoesOn() async throws {
        let (store, errors, delivered) = try following(.postgres)
        let url = try #require(store.database?.url)
        let other = try store.reopen()

        let older = try PostgresConnection(PostgresSettings(url: url))
        try older.execute("BEGIN")
        _ = try older.scalar("SELECT pg_current_xact_id()")    // holds back every later transaction
        try commitAPerson(in: other, named: "Purged")
        try commitAPerson(in: other, named: "Kept")
        // Not settled yet, so `lastHistoryToken()` does not name it: read it from the table.
        let newest = try #require(try store.writtenRows("SELECT \"Z_XID\", \"Z_SEQ\" FROM \"Z_HISTORY\" ORDER BY 1 DESC, 2 DESC LIMIT 1").first)
        let kept = HistoryToken(position: try #require(newest[0].int64Value), sequence: try #require(newest[1].int64Value))
        try other.deleteHistory(before: kept)
        #expect(try await waitForExpiry(in: errors), "the listener finds the purge while the kept transaction is held back: \(errors.all)")
        #expect(delivered.withLock { $0.isEmpty })
        try older.execute("COMMIT")

        try commitAPerson(in: other, named: "After")
        try await wait(for: 2, in: delivered)
        #expect(delivered.withLock { $0.map(\.transaction.token) } == [kept, try other.lastHistoryToken()],
                "the listener went on after the purge: the kept transaction and the next one reached it, nothing purged did")
        #expect(errors.all.filter { ($0 as? HistoryError)?.code == .expired }.count == 1, "\(errors.all)")
    }

    /// A store whose stack's main context could not start following (its history table was
    /// away when the context was made; it is back now), and what reached `onError`: one error.
    @MainActor private func aMainContextThatCouldNotStartFollowing() throws -> (TestStore, ErrorRecorder, MainContext) {
        let store = try TestStore(.file, tracksHistory: true)
        let errors = ErrorRecorder()
        store.stack.onError = { errors.record($0) }
        let raw = try store.rawConnection()
        try raw.execute("ALTER TABLE Z_HISTORY RENAME TO Z_HISTORY_AWAY")
        let world = try MainContext(stack: store.stack)
        #expect(errors.all.count == 1, "the failure to start reached onError")
        try raw.execute("ALTER TABLE Z_HISTORY_AWAY RENAME TO Z_HISTORY")
        return (store, errors, world)
    }

    /// A stack that cannot start following (the newest transaction cannot be read) says so
    /// through `onError`, and the next thing that wants remote commits starts it.
    @Test @MainActor func aFollowerThatCouldNotStartStartsWhenNextWanted() async throws {
        let (store, _, world) = try aMainContextThatCouldNotStartFollowing()

        var commits = store.stack.allCommits.makeAsyncIterator()
        #expect(store.stack.sqliteStore.watchers.withLock { $0.count } == 1, "asking for the commits started following")
        let other = try store.reopen()
        try commitAPerson(in: other, named: "Elsewhere")
        let commit = try #require(await commits.next())
        #expect(commit.isRemote)
        #expect(try world.fetchAll(Person.self).map(\.name) == ["Elsewhere"])
    }

    /// Docs/History.md, "Failure modes": a stack that could not start following tries again by
    /// itself (after half a second, then longer), with nothing else asking: once the history
    /// can be read, it follows, and a remote commit reaches a main context's live results. The
    /// failure went to `onError` once. (The waits bound a hang; they time nothing.)
    @Test @MainActor func aFollowerThatCouldNotStartTriesAgainByItself() async throws {
        let (store, errors, world) = try aMainContextThatCouldNotStartFollowing()
        let results = try FetchedResults(context: world, Person.self)
        for _ in 0..<1000 where store.stack.sqliteStore.watchers.withLock({ $0.isEmpty }) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(store.stack.sqliteStore.watchers.withLock { $0.count } == 1, "it started by itself")
        try commitAPerson(in: try store.reopen(), named: "Elsewhere")
        for _ in 0..<1000 where results.objects.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        #expect(results.objects.map(\.name) == ["Elsewhere"], "the remote commit reached the results")
        #expect(errors.all.count == 1, "\(errors.all)")
    }

    /// Docs/History.md, "Remote commits": PostgreSQL rings on one channel per schema, so a
    /// store's commits do not wake the listeners of stores in other schemas of the database
    /// (other apps, or tests), and every stack of one schema rings on the same channel. A
    /// connection listening on one store's channel hears that store's ring and not the ring of
    /// a store in another schema, committed before it (notifications reach a listener in
    /// commit order, so it would have come first).
    @Test(.enabled(if: PostgresServer.isAvailable, "PostgreSQL suites need a server"))
    func eachSchemaRingsOnAChannelOfItsOwn() async throws {
        let mine = try TestStore(.postgres, tracksHistory: true)
        let theirs = try TestStore(.postgres, tracksHistory: true)
        let (myStore, theirStore) = (try #require(mine.stack.store as? PostgresStore), try #require(theirs.stack.store as? PostgresStore))
        #expect(myStore.historyChannel != theirStore.historyChannel)
        let again = try mine.reopen()
        #expect((again.store as? PostgresStore)?.historyChannel == myStore.historyChannel)

        let listening = try PostgresConnection(myStore.settings)
        try listening.execute("LISTEN \(myStore.historyChannel.quotedIdentifier)")
        try commitAPerson(in: theirs.stack, named: "Elsewhere")
        try commitAPerson(in: mine.stack, named: "Here")
        var heard: [String] = []
        for _ in 0..<1000 where !heard.contains(myStore.instance) {
            heard += try listening.takeNotifications()
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(heard == [myStore.instance], "\(heard); theirs: \(theirStore.instance)")
    }

    /// PostgreSQL: another stack's transaction is held back at the listener's read by an older
    /// one still open, and this stack keeps committing (its own notifications wake the
    /// listener). Once the older one ends — which rings nobody — the catch-up reads the held
    /// transaction within its interval, while this stack's commits go on.
    @Test(.enabled(if: PostgresServer.isAvailable, "PostgreSQL suites need a server"))
    func ownCommitsDoNotPostponeTheCatchUp() async throws {
        let store = try TestStore(.postgres, tracksHistory: true)
        let url = try #require(store.database?.url)
        let delivered = Locked<[RemoteTransaction]>([])
        try store.stack.store.followHistory { transactions in delivered.withLock { $0 += transactions } }
        let other = try store.reopen()

        let older = try PostgresConnection(PostgresSettings(url: url))
        try older.execute("BEGIN")
        _ = try older.scalar("SELECT pg_current_xact_id()")    // holds back every later transaction
        try commitAPerson(in: other, named: "Elsewhere")          // rings, is read, is not settled
        try await Task.sleep(for: .milliseconds(300))
        #expect(delivered.withLock { $0.isEmpty }, "a transaction was delivered before every older one ended")

        // Own commits every 50 ms, until the held transaction arrives or ten seconds pass.
        let stack = store.stack
        let ownCommits = Task.detached {
            var count = 0
            while delivered.withLock({ $0.isEmpty }) && count < 200 {
                try Context(stack: stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
                    try update.create(Person.self).name = "own \(count)"
                    try update.commit()
                }
                count += 1
                try await Task.sleep(for: .milliseconds(50))
            }
            return count
        }
        try older.execute("COMMIT")
        let committed = try await ownCommits.value
        #expect(delivered.withLock { $0.count } == 1, "the held transaction was read while this stack committed")
        #expect(committed < 200, "this stack's commits kept postponing the catch-up")
        #expect(delivered.withLock { $0.first?.transaction.changes.map(\.kind) } == [.insert], "the other stack's one insert")
    }
}
