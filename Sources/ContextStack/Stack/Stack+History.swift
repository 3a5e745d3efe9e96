import _ContextStackModel

/// Persistent history (Docs/History.md): what every save changed, kept in the store, for
/// consumers that were away — a sync engine, a search indexer — to catch up from a token.
extension Stack {
    /// Every transaction saved after `token`, oldest first; from the oldest kept when `token`
    /// is `nil`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let transactions = try stack.history(after: savedToken)
    /// for tx in transactions { for change in tx.changes { index(change.objectID, change.kind) } }
    /// savedToken = transactions.last?.token ?? savedToken
    /// ```
    ///
    /// Each transaction is returned once for each token before it: resuming from the last
    /// token returned never repeats or skips one, also when several processes or machines
    /// save at the same time. Commits the root has not written yet are not in the history.
    ///
    /// - Throws: `HistoryError` `.expired` when transactions after `token` were deleted
    ///   (`deleteHistory(before:)`) — `nil` counts as the beginning —, `.notTracked` when the
    ///   store does not track history.
    public func history(after token: HistoryToken?) throws -> [HistoryTransaction] {
        try store.history(after: token)
    }

    /// Deletes the transactions before `token` (not `token`'s own). Consumers whose saved token
    /// is older get `HistoryError` `.expired` from `history(after:)` from then on.
    ///
    /// - Throws: `HistoryError` `.notTracked`, or the store's error.
    public func deleteHistory(before token: HistoryToken) throws {
        try store.deleteHistory(before: token)
    }

    /// The token of the newest transaction in the history, or `nil` when there is none: where a
    /// new consumer starts following. Take it before reading the current state, so that a
    /// commit in between is seen twice (harmless) rather than never.
    ///
    /// - Throws: `HistoryError` `.notTracked`, or the store's error.
    public func lastHistoryToken() throws -> HistoryToken? {
        try store.lastHistoryToken()
    }
}
