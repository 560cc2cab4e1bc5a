import { renderToString } from 'react-dom/server';

import { UsageTable } from './admin-view';

describe('admin page parts', () => {
  it('shows usage per key with whatever columns the key store records', () => {
    const html = renderToString(<UsageTable rows={[{ name: 'alice', requests: 3, completionTokens: 40 }, { name: 'bob', requests: 1 }]} />);
    expect(html).toContain('<th>completionTokens</th>');
    expect(html).toContain('<td>alice</td><td>3</td><td>40</td>');
    expect(html).toContain('<td>bob</td><td>1</td><td></td>');
    expect(renderToString(<UsageTable rows={[]} />)).toContain('No usage recorded yet');
  });
});
