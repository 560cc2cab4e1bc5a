import { ConsoleHome } from './console-home';

// The API address is given to the server process at start (`kail serve` sets KAIL_API_URL), so
// the page renders per request rather than at build time.
export const dynamic = 'force-dynamic';

export default function Page() {
  return <ConsoleHome apiUrl={process.env.KAIL_API_URL ?? 'http://127.0.0.1:8080'} />;
}
