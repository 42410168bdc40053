// Lists: every list route answers pages `{data, next_cursor}`; a List streams the items of every
// page (`for await`), or the pages themselves, asking for the next page only when it is needed.
import type { Page } from './types.js';

/** Fetches the page after `cursor` (the first without one). */
export type PageFetcher<T> = (cursor: string | undefined) => Promise<Page<T>>;

/**
 * The items of a list route across all its pages.
 *
 * ```ts
 * for await (const contact of gh.contacts.list({ limit: 100 })) console.log(contact.id);
 * const first = await gh.contacts.list().first();   // one page
 * ```
 */
export class List<T> implements AsyncIterable<T> {
  readonly #fetchPage: PageFetcher<T>;
  readonly #cursor: string | undefined;

  constructor(fetchPage: PageFetcher<T>, cursor?: string) {
    this.#fetchPage = fetchPage;
    this.#cursor = cursor;
  }

  /** The pages, one request each, until a page has no `next_cursor`. */
  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let cursor = this.#cursor;
    for (;;) {
      const page = await this.#fetchPage(cursor);
      yield page;
      if (typeof page.next_cursor !== 'string' || page.next_cursor === '') return;
      cursor = page.next_cursor;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for await (const page of this.pages()) yield* page.data;
  }

  /** The first page only (its `next_cursor` continues: `list.from(page.next_cursor)`). */
  first(): Promise<Page<T>> {
    return this.#fetchPage(this.#cursor);
  }

  /** The same list from `cursor` on. */
  from(cursor: string): List<T> {
    return new List(this.#fetchPage, cursor);
  }

  /** Every item (at most `max`), across pages. */
  async toArray(max = Number.POSITIVE_INFINITY): Promise<T[]> {
    const items: T[] = [];
    if (max <= 0) return items;
    for await (const item of this) {
      items.push(item);
      if (items.length >= max) break;
    }
    return items;
  }
}
