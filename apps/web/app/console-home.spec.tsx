import { renderToString } from 'react-dom/server';

import { ConsoleHome } from './console-home';
import Page from './page';

describe('console home', () => {
  it('renders the sections and the API address', () => {
    const html = renderToString(<ConsoleHome apiUrl="http://127.0.0.1:9999" />);
    expect(html).toContain('KailStream');
    expect(html).toContain('Telemetry');
    expect(html).toContain('http://127.0.0.1:9999');
    // How each family of clients reaches the server.
    expect(html).toContain('http://127.0.0.1:9999/v1');
    expect(html).toContain('Ollama');
    expect(html).toContain('Anthropic');
  });

  it('the page passes the configured API address', () => {
    const html = renderToString(<Page />);
    expect(html).toContain('data-testid="api-url"');
  });
});
