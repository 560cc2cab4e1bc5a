import type { ReactNode } from 'react';

import { Shell } from './_components/shell';
import './globals.css';

export const metadata = {
  title: 'KailStream console',
  description: 'Models, chat and live telemetry for a KailStream server',
};

export default function RootLayout({ children }: { children: ReactNode }) {
  return (
    <html lang="en">
      <body>
        <Shell>{children}</Shell>
      </body>
    </html>
  );
}
