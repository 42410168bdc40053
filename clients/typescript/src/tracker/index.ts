// @gatehouse/client/tracker: the browser (and Node) event tracker, its queues and its sender.
export { uuid } from '../uuid.js';
export { Tracker, MAX_AGE_MS, type TrackerOptions, type FlushResult, type Ids } from './tracker.js';
export { MemoryQueue, byAge, type Queue, type QueuedItem, type ItemKind } from './queue.js';
export { IndexedDbQueue } from './idb-queue.js';
export { Sender, pack, BODY_BUDGET, KEEPALIVE_BUDGET, type Outcome, type Rejection } from './sender.js';
