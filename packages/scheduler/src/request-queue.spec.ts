import { RequestQueue, type QueueItem } from './request-queue';

const item = (id: string, tenant: string, priority = 0, cost = 100): QueueItem => ({ id, tenant, priority, cost });

function drain(q: RequestQueue<QueueItem>, eligible?: (i: QueueItem) => boolean): string[] {
  const out: string[] = [];
  for (let it = q.pop(eligible); it; it = q.pop(eligible)) out.push(it.id);
  return out;
}

describe('RequestQueue', () => {
  it('does not let a heavy tenant starve a light one (deficit round robin)', () => {
    const q = new RequestQueue({ maxQueued: 100, maxQueuedPerTenant: 100, quantum: 100 });
    for (let i = 0; i < 20; i++) q.push(item(`heavy${i}`, 'heavy'));
    q.push(item('light0', 'light'));
    q.push(item('light1', 'light'));
    const order = drain(q);
    // The light tenant arrived after 20 heavy requests, yet both of its requests run within the first five.
    expect(order.indexOf('light0')).toBeLessThan(3);
    expect(order.indexOf('light1')).toBeLessThan(5);
    expect(order).toHaveLength(22);
  });

  it('charges cost: a tenant asking for 4x the tokens gets about a quarter of the turns', () => {
    const q = new RequestQueue({ maxQueued: 100, maxQueuedPerTenant: 100, quantum: 100 });
    for (let i = 0; i < 20; i++) q.push(item(`big${i}`, 'big', 0, 400));
    for (let i = 0; i < 20; i++) q.push(item(`small${i}`, 'small', 0, 100));
    const first20 = drain(q).slice(0, 20);
    const big = first20.filter((x) => x.startsWith('big')).length;
    expect(big).toBeGreaterThanOrEqual(3);
    expect(big).toBeLessThanOrEqual(5);
  });

  it('runs higher priority first and stays FIFO within a tenant', () => {
    const q = new RequestQueue();
    q.push(item('low1', 'a', 0));
    q.push(item('low2', 'a', 0));
    q.push(item('high', 'b', 5));
    expect(drain(q)).toEqual(['high', 'low1', 'low2']);
  });

  it('skips requests that cannot run now (no free engine for their model) without losing them', () => {
    const q = new RequestQueue();
    q.push(item('a1', 'x', 9));
    q.push(item('b1', 'y', 0));
    expect(drain(q, (i) => i.id !== 'a1')).toEqual(['b1']);
    expect(q.size).toBe(1);
    expect(drain(q)).toEqual(['a1']);
  });

  it('is bounded in total and per tenant, with messages that say which bound', () => {
    const q = new RequestQueue({ maxQueued: 3, maxQueuedPerTenant: 2 });
    expect(q.push(item('1', 'a'))).toBeUndefined();
    expect(q.push(item('2', 'a'))).toBeUndefined();
    expect(q.push(item('3', 'a'))).toEqual({ reason: 'tenant-full', message: expect.stringContaining("tenant 'a' already has 2 requests waiting") });
    expect(q.push(item('4', 'b'))).toBeUndefined();
    expect(q.push(item('5', 'c'))).toEqual({ reason: 'full', message: expect.stringContaining('queue is full (3 requests waiting, limit 3)') });
    expect(q.queuedPerTenant()).toEqual({ a: 2, b: 1 });
    expect(q.remove('1')?.id).toBe('1');
    expect(q.remove('1')).toBeUndefined();
    expect(q.queuedPerTenant()).toEqual({ a: 1, b: 1 });
    expect(drain(q).sort()).toEqual(['2', '4']);
    expect(q.size).toBe(0);
  });
});
