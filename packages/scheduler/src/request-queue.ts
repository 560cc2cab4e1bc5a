/** What the queue needs to know about a request. */
export interface QueueItem {
  id: string;
  tenant: string;
  /** Higher runs first. */
  priority: number;
  /** Work it asks for (tokens it may generate); fairness charges this against its tenant. */
  cost: number;
}

export interface RequestQueueOptions {
  /** Most requests queued in all (default 256). */
  maxQueued?: number;
  /** Most requests one tenant may have queued (default maxQueued / 2, at least 1). */
  maxQueuedPerTenant?: number;
  /** Cost credited to a tenant per round (default 256 tokens). */
  quantum?: number;
}

/** Why push refused an item. */
export type QueueRefusal = { reason: 'full' | 'tenant-full'; message: string };

interface TenantQueue<T> {
  tenant: string;
  items: T[];
  deficit: number;
  /** Got its quantum on the current visit of the cursor. */
  credited: boolean;
}

// One priority level: deficit round robin across tenants (Shreedhar & Varghese), so a tenant
// sending many or long requests gets the same share of turns as one sending few.
class Level<T extends QueueItem> {
  readonly ring: TenantQueue<T>[] = [];
  cursor = 0;

  push(item: T): void {
    let q = this.ring.find((t) => t.tenant === item.tenant);
    if (!q) {
      q = { tenant: item.tenant, items: [], deficit: 0, credited: false };
      // New tenants join just before the cursor: they wait one full round at most.
      this.ring.splice(this.cursor, 0, q);
      this.cursor = (this.cursor + 1) % this.ring.length;
    }
    q.items.push(item);
  }

  /** The next eligible item by DRR; undefined when no tenant's head is eligible. */
  pop(eligible: (item: T) => boolean, quantum: number): T | undefined {
    if (!this.ring.length) return undefined;
    // Heads that are not eligible (their model has no free engine) are skipped without credit.
    if (!this.ring.some((q) => eligible(q.items[0]))) return undefined;
    for (;;) {
      const q = this.ring[this.cursor];
      const head = q.items[0];
      if (eligible(head)) {
        if (q.deficit >= head.cost) {
          q.deficit -= head.cost;
          q.items.shift();
          if (!q.items.length) this.drop(this.cursor);
          return head;
        }
        // One quantum per visit; the tenant keeps the turn while its deficit covers its next request.
        if (!q.credited) {
          q.deficit += quantum;
          q.credited = true;
          continue;
        }
      }
      q.credited = false;
      this.cursor = (this.cursor + 1) % this.ring.length;
    }
  }

  remove(id: string): T | undefined {
    for (let i = 0; i < this.ring.length; i++) {
      const q = this.ring[i];
      const at = q.items.findIndex((x) => x.id === id);
      if (at < 0) continue;
      const [item] = q.items.splice(at, 1);
      if (!q.items.length) this.drop(i);
      return item;
    }
    return undefined;
  }

  private drop(i: number): void {
    this.ring.splice(i, 1);
    if (this.cursor > i) this.cursor--;
    if (this.cursor >= this.ring.length) this.cursor = 0;
  }
}

/**
 * The scheduler's waiting room: strict priority between levels, deficit round robin across
 * tenants within a level, FIFO within a tenant; bounded in total and per tenant. A pure data
 * structure: no timers, no I/O (the service owns the loop).
 */
export class RequestQueue<T extends QueueItem> {
  private readonly levels = new Map<number, Level<T>>();
  private readonly byId = new Map<string, T>();
  private readonly perTenant = new Map<string, number>();
  readonly maxQueued: number;
  readonly maxQueuedPerTenant: number;
  private readonly quantum: number;

  constructor(opts: RequestQueueOptions = {}) {
    this.maxQueued = Math.max(1, opts.maxQueued ?? 256);
    this.maxQueuedPerTenant = Math.max(1, opts.maxQueuedPerTenant ?? Math.floor(this.maxQueued / 2));
    this.quantum = Math.max(1, opts.quantum ?? 256);
  }

  get size(): number {
    return this.byId.size;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  /** Queues an item, or says why not (the queue or the tenant's share is full). */
  push(item: T): QueueRefusal | undefined {
    if (this.byId.size >= this.maxQueued)
      return { reason: 'full', message: `the scheduler queue is full (${this.byId.size} requests waiting, limit ${this.maxQueued}); retry later` };
    const n = this.perTenant.get(item.tenant) ?? 0;
    if (n >= this.maxQueuedPerTenant)
      return { reason: 'tenant-full', message: `tenant '${item.tenant}' already has ${n} requests waiting (limit ${this.maxQueuedPerTenant}); retry later` };
    let level = this.levels.get(item.priority);
    if (!level) this.levels.set(item.priority, (level = new Level<T>()));
    level.push(item);
    this.byId.set(item.id, item);
    this.perTenant.set(item.tenant, n + 1);
    return undefined;
  }

  /** The next item to run among those `eligible` accepts: highest priority first, then DRR. */
  pop(eligible: (item: T) => boolean = () => true): T | undefined {
    for (const p of [...this.levels.keys()].sort((a, b) => b - a)) {
      const item = this.levels.get(p)!.pop(eligible, this.quantum);
      if (item) {
        this.forget(item);
        return item;
      }
    }
    return undefined;
  }

  remove(id: string): T | undefined {
    const item = this.byId.get(id);
    if (!item) return undefined;
    this.levels.get(item.priority)!.remove(id);
    this.forget(item);
    return item;
  }

  items(): T[] {
    return [...this.byId.values()];
  }

  queuedPerTenant(): Record<string, number> {
    return Object.fromEntries(this.perTenant);
  }

  private forget(item: T): void {
    this.byId.delete(item.id);
    const n = (this.perTenant.get(item.tenant) ?? 1) - 1;
    if (n > 0) this.perTenant.set(item.tenant, n);
    else this.perTenant.delete(item.tenant);
    const level = this.levels.get(item.priority);
    if (level && !level.ring.length) this.levels.delete(item.priority);
  }
}
